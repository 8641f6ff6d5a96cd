// The soft memory limit (LOWTIDE_LIMIT, or the cgroup's) from a program's
// side. Each scenario runs as a child with its own settings: 40 blocks of
// 8 MiB (320 MiB, touched) are allocated, then freed, and RSS is read right
// after the last free.
//
//   limited   LOWTIDE_LIMIT=64M: while the process is over the limit a freed
//             block is not cached; after the frees RSS is at most 72 MiB above
//             the baseline; the report shows the limit and "env".
//   unlimited LOWTIDE_LIMIT=0: the same frees leave them cached and resident,
//             up to LOWTIDE_CACHE's default ("auto": a sixteenth of the
//             machine's RAM, at most 256 MiB, computed here too), which is
//             what the limit prevents;
//             the report shows no limit and that cap.
//   cgroup    no LOWTIDE_LIMIT, a fake cgroup v2 tree (LOWTIDE_CGROUP_ROOT)
//             whose memory.max is 64 MiB: as limited, the report "cgroup_v2".
//
// LOWTIDE_DECAY_MS is an hour in every child, so nothing leaves the cache
// by age: whatever is given back is given back because of the limit.
#include <sys/stat.h>
#include <sys/sysinfo.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "../lowtide_stats.hpp"

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr int kBlocks = 40;
constexpr std::size_t kBlock = 8 * MiB;

std::size_t rss() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  CHECK(f != nullptr);
  unsigned long size = 0, resident = 0;
  CHECK(std::fscanf(f, "%lu %lu", &size, &resident) == 2);
  std::fclose(f);
  return resident * 4096;
}

struct Result {
  std::size_t baseline, after;
  std::uint64_t cached_while_over, cached_after;
};

Result free_320_mib() {
  static void* blocks[kBlocks];
  Result r{};
  r.baseline = rss();
  for (void*& b : blocks) {
    b = std::malloc(lt::opaque(kBlock));
    CHECK(b != nullptr);
    std::memset(b, 0x5A, kBlock);
  }
  // 312 MiB still live: a limited process is far over 64 MiB.
  std::free(blocks[0]);
  r.cached_while_over = lt::read_stats().large_cached_bytes;
  for (int i = 1; i < kBlocks; ++i) std::free(blocks[i]);
  r.after = rss();
  r.cached_after = lt::read_stats().large_cached_bytes;
  std::printf("baseline %zu MiB, after the frees %zu MiB (+%zd MiB), cached while over %llu MiB, after %llu MiB\n",
              r.baseline / MiB, r.after / MiB, static_cast<long>(r.after - r.baseline) / static_cast<long>(MiB),
              static_cast<unsigned long long>(r.cached_while_over / MiB),
              static_cast<unsigned long long>(r.cached_after / MiB));
  return r;
}

void check_limited(const Result& r) {
  CHECK(r.cached_while_over == 0, "%llu bytes cached while the process was over its limit",
        static_cast<unsigned long long>(r.cached_while_over));
  CHECK(r.after <= r.baseline + 72 * MiB, "RSS %zu MiB after freeing 320 MiB under a 64 MiB limit (baseline %zu MiB)",
        r.after / MiB, r.baseline / MiB);
  CHECK(r.cached_after <= 56 * MiB, "the cache holds %llu MiB, more than 7/8 of the limit",
        static_cast<unsigned long long>(r.cached_after / MiB));
}

// LOWTIDE_CACHE=auto's cap, computed here: a sixteenth of the RAM sysinfo
// reports (as the library asks; /proc/meminfo may differ under LXCFS), at
// most 256 MiB.
std::size_t auto_cap() {
  struct sysinfo si;
  CHECK(sysinfo(&si) == 0);
  const unsigned long long ram = static_cast<unsigned long long>(si.totalram) * (si.mem_unit != 0 ? si.mem_unit : 1);
  const std::size_t sixteenth = static_cast<std::size_t>(ram / 16);
  return sixteenth < 256 * MiB ? sixteenth : 256 * MiB;
}

int run(const char* scenario) {
  Result r = free_320_mib();
  if (std::strcmp(scenario, "unlimited") == 0) {
    // What the limit is there to prevent: the cache keeps what it may, its
    // whole cap (256 MiB from a 4 GiB machine on), or all 320 MiB.
    const std::size_t cap = auto_cap();
    const std::size_t keep = cap < kBlocks * kBlock ? cap : kBlocks * kBlock;
    CHECK(r.cached_after + kBlock >= keep, "only %llu MiB cached without a limit (cap %zu MiB)",
          static_cast<unsigned long long>(r.cached_after / MiB), cap / MiB);
    CHECK(r.after + 2 * kBlock >= r.baseline + keep, "RSS only %zu MiB above the baseline without a limit",
          (r.after - r.baseline) / MiB);
  } else {
    check_limited(r);
  }
  return 0;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write(const std::string& path, const std::string& text) {
  for (std::size_t i = 1; i < path.size(); ++i)
    if (path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
  std::ofstream(path) << text;
}

// Run this program as `scenario` with the given variables, then check its
// JSON report for the limit and its source.
int child(const char* scenario, const std::string& dir, const char* const* env, const char* limit_keys) {
  const std::string report = dir + "/" + scenario + ".json";
  pid_t pid = fork();
  if (pid == 0) {
    setenv("LOWTIDE_DECAY_MS", "3600000", 1);
    setenv("LOWTIDE_STATS", "json", 1);
    setenv("LOWTIDE_STATS_FILE", report.c_str(), 1);
    for (const char* const* e = env; *e != nullptr; e += 2) setenv(e[0], e[1], 1);
    execl("/proc/self/exe", "/proc/self/exe", scenario, static_cast<char*>(nullptr));
    _exit(127);
  }
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  std::string json = slurp(report);
  if (json.find(limit_keys) == std::string::npos) {
    std::printf("%s: the report lacks %s:\n%.600s\n", scenario, limit_keys, json.c_str());
    ok = false;
  }
  std::printf("%-10s %s\n", scenario, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) return run(argv[1]);
  char tmpl[] = "/tmp/lowtide-limit-XXXXXX";
  CHECK(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  // A process in cgroup /job of a v2 hierarchy mounted at /sys/fs/cgroup.
  const std::string fake = dir + "/root";
  write(fake + "/proc/self/cgroup", "0::/job\n");
  write(fake + "/proc/self/mountinfo",
        "30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n");
  write(fake + "/sys/fs/cgroup/job/memory.max", "67108864\n");
  write(fake + "/sys/fs/cgroup/job/memory.high", "max\n");

  const char* const limited[] = {"LOWTIDE_LIMIT", "64M", nullptr};
  const char* const unlimited[] = {"LOWTIDE_LIMIT", "0", nullptr};
  const char* const from_cgroup[] = {"LOWTIDE_CGROUP_ROOT", fake.c_str(), nullptr};
  int failed = 0;
  failed += child("limited", dir, limited, "\"limit\": 67108864, \"limit_source\": \"env\"");
  const std::string no_limit = "\"limit\": 0, \"limit_source\": \"none\", \"cache_cap\": " + std::to_string(auto_cap());
  failed += child("unlimited", dir, unlimited, no_limit.c_str());
  failed += child("cgroup", dir, from_cgroup, "\"limit\": 67108864, \"limit_source\": \"cgroup_v2\"");
  CHECK(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
  return failed == 0 ? 0 : 1;
}
