// The sampler's libm replacements (src/sample_math.hpp) against libm.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "sample_math.hpp"

using namespace lowtide::sample_math;

namespace {

// Relative error, with an absolute floor for answers at or near 0.
double rel(double got, double want) {
  double d = std::fabs(got - want);
  double m = std::fabs(want);
  return m < 1e-300 ? d : d / m;
}

// A fixed xorshift stream: the same inputs on every run.
std::uint64_t next(std::uint64_t* s) {
  std::uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545f4914f6cdd1dULL;
}

}  // namespace

TEST_CASE("ln agrees with libm's log to a few ulp") {
  const double exact[] = {1.0, 2.0, 0.5, 0x1.0p-53, 0x1.0p-1022, 0x1.0p-1074, DBL_MAX, 0.1, 0.9999999999999999,
                          1.0000000000000002, 0x1.6a09e667f3bcdp0, 0x1.6a09e667f3bccp0, 3.0, 1e300};
  for (double x : exact) {
    INFO("x = " << x);
    if (x == 1.0) CHECK(ln(x) == 0.0);
    else CHECK(rel(ln(x), std::log(x)) < 4 * DBL_EPSILON);
  }
  // What the sampler feeds it: u = k * 2^-53, k in [1, 2^53], spread over
  // every binade.
  std::uint64_t s = 0x9e3779b97f4a7c15ULL;
  double worst = 0;
  for (int i = 0; i < 200000; ++i) {
    std::uint64_t r = next(&s);
    double u = static_cast<double>((r >> 11) + 1) * 0x1.0p-53;
    u = std::ldexp(u, -static_cast<int>(r % 60));
    worst = std::max(worst, rel(ln(u), std::log(u)));
  }
  CHECK(worst < 4 * DBL_EPSILON);
}

TEST_CASE("one_minus_exp_neg agrees with libm's -expm1(-t)") {
  CHECK(one_minus_exp_neg(0.0) == 0.0);
  CHECK(one_minus_exp_neg(-1.0) == 0.0);
  CHECK(one_minus_exp_neg(1e9) == 1.0);
  const double exact[] = {1e-300, 1e-20, 1e-9, 0.25, 0.4999999, 0.5, 0.6931471805599453, 1.0, 10.0, 39.99, 40.0, 700.0};
  for (double t : exact) {
    INFO("t = " << t);
    CHECK(rel(one_minus_exp_neg(t), -std::expm1(-t)) < 4 * DBL_EPSILON);
  }
  // size / interval over the ranges the sampler sees: tiny blocks against
  // a 512 KiB interval up to blocks far larger than it.
  std::uint64_t s = 0x243f6a8885a308d3ULL;
  double worst = 0;
  for (int i = 0; i < 200000; ++i) {
    std::uint64_t r = next(&s);
    double t = std::ldexp(static_cast<double>(r >> 11) * 0x1.0p-53, static_cast<int>(r % 70) - 50);
    worst = std::max(worst, rel(one_minus_exp_neg(t), -std::expm1(-t)));
  }
  CHECK(worst < 4 * DBL_EPSILON);
}

TEST_CASE("round_nonneg rounds as lround does") {
  const double xs[] = {0.0, 0.49999999999999994, 0.5, 1.5, 2.5, 2.4999999999999996, 1e9 + 0.5, 4294967295.0, 123.456};
  for (double x : xs) {
    INFO("x = " << x);
    CHECK(round_nonneg(x) == static_cast<std::uint32_t>(std::lround(x)));
  }
  std::uint64_t s = 0x13198a2e03707344ULL;
  for (int i = 0; i < 100000; ++i) {
    double x = static_cast<double>(next(&s) >> 11) * 0x1.0p-53 * 0x1.0p31;
    REQUIRE(round_nonneg(x) == static_cast<std::uint32_t>(std::lround(x)));
  }
}
