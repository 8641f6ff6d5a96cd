// The three functions the call-site sampler (sites.cpp) needs from libm,
// written out so that lowtide does not link libm: a host that does not load
// libm itself (a small C program, a shell) paid ~340 KiB of RSS for its
// pages (docs/benchmarks.md "Fixed footprint"). Accurate to a few ulp, which
// is far below what a sampling interval or a weight rounded to an integer
// can show; tests/unit/sample_math_test.cpp holds them to libm's answers.
#pragma once
#include <cstdint>
#include <cstring>

namespace lowtide::sample_math {

inline constexpr double kLn2 = 0x1.62e42fefa39efp-1;

// ln(x) for finite x > 0. x = m * 2^e with m in [sqrt(1/2), sqrt(2)), then
// ln m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...) with s = (m-1)/(m+1),
// |s| <= 0.172: 13 terms leave < 1e-21.
inline double ln(double x) noexcept {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  int e = static_cast<int>((b >> 52) & 0x7ff);
  if (e == 0) {  // subnormal: bring it into the normal range first
    x *= 0x1.0p54;
    std::memcpy(&b, &x, sizeof b);
    e = static_cast<int>((b >> 52) & 0x7ff) - 54;
  }
  e -= 1023;
  b = (b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;
  double m;
  std::memcpy(&m, &b, sizeof m);
  if (m > 0x1.6a09e667f3bcdp0) {
    m *= 0.5;
    ++e;
  }
  const double s = (m - 1) / (m + 1), s2 = s * s;
  double term = s, sum = 0;
  for (int k = 1; k <= 25; k += 2) {
    sum += term / k;
    term *= s2;
  }
  return 2 * sum + e * kLn2;
}

// 1 - e^-t (libm's -expm1(-t)) for t >= 0, without the cancellation of
// computing e^-t first when t is small. The series are evaluated nested,
// from the smallest term up: t (1 - t/2 (1 - t/3 (1 - ...))).
inline double one_minus_exp_neg(double t) noexcept {
  if (!(t > 0)) return 0;
  if (t < 1) {  // 25 terms leave < 1e-25
    double acc = 1;
    for (int k = 25; k >= 2; --k) acc = 1 - t / k * acc;
    return t * acc;
  }
  if (t >= 40) return 1;  // e^-40 < 2^-54: 1 - it rounds to 1
  // From 1 on, e^-t <= 0.37 and 1 - e^-t loses little to cancellation.
  // e^-t = 2^-k e^-r, r = t - k ln 2 in [0, ln 2): the series for e^-r
  // (20 terms leave < 1e-21), then the power of two put into the exponent.
  const int k = static_cast<int>(t / kLn2);
  const double r = t - k * kLn2;
  double acc = 1;
  for (int i = 20; i >= 1; --i) acc = 1 - r / i * acc;
  const std::uint64_t bits = static_cast<std::uint64_t>(1023 - k) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return 1 - acc * scale;
}

// x rounded to the nearest integer, halves away from zero (libm's lround),
// for 0 <= x < 2^32.
inline std::uint32_t round_nonneg(double x) noexcept {
  auto r = static_cast<std::uint32_t>(x);
  if (x - r >= 0.5) ++r;
  return r;
}

}  // namespace lowtide::sample_math
