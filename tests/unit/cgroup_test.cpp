// The memory limit's inputs: the cgroup files' parsing on their text, the
// whole discovery on fake trees (what LOWTIDE_CGROUP_ROOT points at), the
// room the limit leaves the cache, and LOWTIDE_LIMIT's option row.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "cgroup.hpp"
#include "mem_limit.hpp"
#include "options.hpp"
#include "platform.hpp"
#include "state.hpp"

using namespace lowtide;
using cgroup::Value;

namespace {

constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

Value value(const char* text, std::uint64_t* v) {
  *v = 12345;  // untouched unless bytes
  return cgroup::parse_value(text, v);
}

// A fake root: files written under a fresh temporary directory.
struct Tree {
  std::string root;
  Tree() {
    char tmpl[] = "/tmp/lowtide-cgroup-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    root = tmpl;
  }
  ~Tree() { REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0); }
  void write(const std::string& rel, const std::string& text) {
    std::string path = root + rel;
    for (std::size_t i = 1; i < path.size(); ++i)
      if (path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
    std::ofstream(path) << text;
  }
  cgroup::Found discover() {
    static char scratch[64 << 10];
    cgroup::Location v2, v1;
    return cgroup::discover(root.c_str(), scratch, sizeof scratch, &v2, &v1);
  }
};

const char* const kMountinfoV2 =
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
const char* const kMountinfoV1 =
    "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

}  // namespace

TEST_CASE("cgroup: a limit file's value: bytes, max, v1's unlimited, garbage") {
  std::uint64_t v = 0;
  CHECK(value("67108864\n", &v) == Value::bytes);
  CHECK(v == 64 * MiB);
  CHECK(value("  1024  ", &v) == Value::bytes);
  CHECK(v == 1024);
  CHECK(value("0\n", &v) == Value::bytes);
  CHECK(v == 0);
  CHECK(value("max\n", &v) == Value::unlimited);
  CHECK(value("9223372036854771712\n", &v) == Value::unlimited);  // v1: LONG_MAX rounded to a page
  CHECK(value("99999999999999999999999999", &v) == Value::unlimited);
  for (const char* bad : {"", "\n", "maxx", "-1", "12k", "0x100", "1 2", "1.5", "unlimited", "ma"}) {
    INFO(bad);
    CHECK(value(bad, &v) == Value::bad);
    CHECK(v == 12345);
  }
}

TEST_CASE("cgroup: the process's own path in /proc/self/cgroup, v2 and v1") {
  char out[128];
  const char* hybrid = "12:pids:/user.slice\n4:memory:/docker/abc\n1:name=systemd:/x\n0::/user.slice/u.scope\n";
  REQUIRE(cgroup::own_path(hybrid, true, out, sizeof out));
  CHECK(std::string(out) == "/user.slice/u.scope");
  REQUIRE(cgroup::own_path(hybrid, false, out, sizeof out));
  CHECK(std::string(out) == "/docker/abc");
  REQUIRE(cgroup::own_path("5:cpu,memory,blkio:/a/b", false, out, sizeof out));
  CHECK(std::string(out) == "/a/b");
  CHECK_FALSE(cgroup::own_path("0::/only-v2\n", false, out, sizeof out));
  CHECK_FALSE(cgroup::own_path("4:memoryx:/a\n3:cpu:/b", false, out, sizeof out));
  CHECK_FALSE(cgroup::own_path("4:memory:/a\n", true, out, sizeof out));
  CHECK_FALSE(cgroup::own_path("", true, out, sizeof out));
  CHECK_FALSE(cgroup::own_path("garbage without colons", true, out, sizeof out));
  CHECK_FALSE(cgroup::own_path("0::/a-path-longer-than-the-buffer", true, out, 8));
}

TEST_CASE("cgroup: the cgroup mounts in mountinfo, escapes decoded") {
  char mp[128], root[128];
  REQUIRE(cgroup::find_mount(kMountinfoV2, true, mp, sizeof mp, root, sizeof root));
  CHECK(std::string(mp) == "/sys/fs/cgroup");
  CHECK(std::string(root) == "/");
  CHECK_FALSE(cgroup::find_mount(kMountinfoV2, false, mp, sizeof mp, root, sizeof root));
  REQUIRE(cgroup::find_mount(kMountinfoV1, false, mp, sizeof mp, root, sizeof root));
  CHECK(std::string(mp) == "/sys/fs/cgroup/memory");
  REQUIRE(cgroup::find_mount(kMountinfoV1, true, mp, sizeof mp, root, sizeof root));
  CHECK(std::string(mp) == "/sys/fs/cgroup/unified");
  REQUIRE(cgroup::find_mount("40 1 0:3 /docker/x /my\\040cg rw - cgroup2 none rw\n", true, mp, sizeof mp, root,
                             sizeof root));
  CHECK(std::string(mp) == "/my cg");
  CHECK(std::string(root) == "/docker/x");
  CHECK_FALSE(cgroup::find_mount("garbage\n\n- - -\n", true, mp, sizeof mp, root, sizeof root));
  CHECK_FALSE(cgroup::find_mount("", false, mp, sizeof mp, root, sizeof root));
}

TEST_CASE("cgroup: the directory of a path under a mount's root") {
  char out[128];
  REQUIRE(cgroup::directory("/sys/fs/cgroup", "/", "/a/b", out, sizeof out));
  CHECK(std::string(out) == "/sys/fs/cgroup/a/b");
  REQUIRE(cgroup::directory("/sys/fs/cgroup", "/", "/", out, sizeof out));
  CHECK(std::string(out) == "/sys/fs/cgroup");
  REQUIRE(cgroup::directory("/sys/fs/cgroup", "/docker/x", "/docker/x/sub", out, sizeof out));
  CHECK(std::string(out) == "/sys/fs/cgroup/sub");
  // Outside the mount's root (a container seeing its host's path): the mount itself.
  REQUIRE(cgroup::directory("/sys/fs/cgroup", "/docker/x", "/docker/xy", out, sizeof out));
  CHECK(std::string(out) == "/sys/fs/cgroup");
  CHECK_FALSE(cgroup::directory("/sys/fs/cgroup", "/", "/a/b", out, 10));
}

TEST_CASE("cgroup: v2: the lower of memory.high and memory.max over the cgroup and its parents") {
  Tree t;
  t.write("/proc/self/cgroup", "0::/app/worker\n");
  t.write("/proc/self/mountinfo", kMountinfoV2);
  t.write("/sys/fs/cgroup/app/worker/memory.max", "max\n");
  t.write("/sys/fs/cgroup/app/worker/memory.high", "max\n");
  CHECK(t.discover().source == cgroup::Source::none);
  t.write("/sys/fs/cgroup/app/worker/memory.max", "536870912\n");
  cgroup::Found f = t.discover();
  CHECK(f.source == cgroup::Source::cgroup_v2);
  CHECK(f.limit == 512 * MiB);
  t.write("/sys/fs/cgroup/app/worker/memory.high", "268435456\n");
  CHECK(t.discover().limit == 256 * MiB);
  t.write("/sys/fs/cgroup/app/memory.max", "134217728\n");  // the parent binds
  CHECK(t.discover().limit == 128 * MiB);
  t.write("/sys/fs/cgroup/app/memory.max", "lots\n");  // garbage: as if absent
  CHECK(t.discover().limit == 256 * MiB);
}

// While a fork is being prepared no file is opened (pal::kNoWindow): the
// limit read then says so (refused), so that mem_limit's re-read keeps the
// limit it had rather than take the 0 for "no limit". Read again after
// the fork, the same files give the limit and no refusal.
TEST_CASE("cgroup: a limit not read for want of a fork window is refused, not none") {
  Tree t;
  t.write("/proc/self/cgroup", "0::/app\n");
  t.write("/proc/self/mountinfo", kMountinfoV2);
  t.write("/sys/fs/cgroup/app/memory.max", "536870912\n");
  static char scratch[64 << 10];
  cgroup::Location v2, v1;
  REQUIRE(cgroup::discover(t.root.c_str(), scratch, sizeof scratch, &v2, &v1).limit == 512 * MiB);
  bool refused = true;
  CHECK(cgroup::read_limit(v2, &refused) == 512 * MiB);
  CHECK_FALSE(refused);
  pal::fork_wait_scans();
  CHECK(cgroup::read_limit(v2, &refused) == 0);
  CHECK(refused);
  pal::fork_scans_done(false);
  CHECK(cgroup::read_limit(v2, &refused) == 512 * MiB);
  CHECK_FALSE(refused);
}

// The same at discovery (lowtide's start, where a start inside a fork's
// prepare handler meets a shut gate): an unread /proc/self/cgroup said "no
// cgroup" for good before. Now discover() says it was refused, and the
// memory limit's decay-thread tick discovers again until it has read
// everything, instead of keeping no limit for the life of the process.
TEST_CASE("cgroup: a discovery that met a shut fork gate is refused, and done again at the next tick") {
  Tree t;
  t.write("/proc/self/cgroup", "0::/app\n");
  t.write("/proc/self/mountinfo", kMountinfoV2);
  t.write("/sys/fs/cgroup/app/memory.max", "536870912\n");
  pal::fork_wait_scans();
  cgroup::Found f = t.discover();
  pal::fork_scans_done(false);
  CHECK(f.refused);
  CHECK(f.limit == 0);
  f = t.discover();
  CHECK_FALSE(f.refused);
  CHECK(f.limit == 512 * MiB);

  // limit::init and tick on the same tree (LOWTIDE_CGROUP_ROOT), the
  // process's configuration put back after.
  const Config saved = g.config;
  const std::string root_var = "LOWTIDE_CGROUP_ROOT=" + t.root;
  const char* env[] = {root_var.c_str(), nullptr};
  load_config(&g.config, env, false, [](const char*, const char*, const char*, const char*) {});
  pal::fork_wait_scans();
  limit::init(nullptr);
  CHECK(limit::current() == 0);  // not known yet
  limit::tick();                 // the gate still shut: still not known
  CHECK(limit::current() == 0);
  pal::fork_scans_done(false);
  limit::tick();  // the next tick, not 4 s later
  CHECK(limit::current() == 512 * MiB);
  CHECK(limit::source() == cgroup::Source::cgroup_v2);
  t.write("/sys/fs/cgroup/app/memory.max", "268435456\n");
  limit::tick();  // discovered: the files are re-read every 4 s only
  CHECK(limit::current() == 512 * MiB);

  // A discovery that found everything keeps its limit for the next 4 s.
  limit::init(nullptr);
  CHECK(limit::current() == 256 * MiB);
  const char* none[] = {"LOWTIDE_LIMIT=0", nullptr};
  load_config(&g.config, none, false, [](const char*, const char*, const char*, const char*) {});
  limit::init(nullptr);
  CHECK(limit::current() == 0);
  CHECK(limit::source() == cgroup::Source::none);
  g.config = saved;
}

TEST_CASE("cgroup: v1: memory.limit_in_bytes, unlimited ignored; v2 without a memory controller falls to v1") {
  Tree t;
  t.write("/proc/self/cgroup", "4:memory:/job\n1:cpu:/job\n0::/\n");
  t.write("/proc/self/mountinfo", kMountinfoV1);
  t.write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
  t.write("/sys/fs/cgroup/memory/job/memory.limit_in_bytes", "9223372036854771712\n");
  CHECK(t.discover().source == cgroup::Source::none);
  t.write("/sys/fs/cgroup/memory/job/memory.limit_in_bytes", "1073741824\n");
  cgroup::Found f = t.discover();
  CHECK(f.source == cgroup::Source::cgroup_v1);
  CHECK(f.limit == 1024 * MiB);
}

TEST_CASE("cgroup: no mountinfo: the conventional mount point; missing files: no limit") {
  Tree t;
  CHECK(t.discover().source == cgroup::Source::none);  // nothing at all
  t.write("/proc/self/cgroup", "0::/\n");
  CHECK(t.discover().source == cgroup::Source::none);  // the root cgroup has no memory.max
  t.write("/sys/fs/cgroup/memory.max", "100000000\n");
  cgroup::Found f = t.discover();
  CHECK(f.source == cgroup::Source::cgroup_v2);
  CHECK(f.limit == 100000000);
  t.write("/proc/self/cgroup", "garbage\n");
  CHECK(t.discover().source == cgroup::Source::none);
}

TEST_CASE("limit: the room left to the cache keeps the process under seven eighths of the limit") {
  const std::uint64_t L = 64 * MiB;
  CHECK(limit::room_for(0, 1000 * MiB, 0) == SIZE_MAX);         // no limit
  CHECK(limit::room_for(L, 8 * MiB, 0) == 48 * MiB);            // 56 MiB - 8 MiB
  CHECK(limit::room_for(L, 40 * MiB, 32 * MiB) == 48 * MiB);    // what the cache holds is not "the process"
  CHECK(limit::room_for(L, 56 * MiB, 0) == 0);                  // near the limit: nothing
  CHECK(limit::room_for(L, 64 * MiB, 0) == 0);                  // at it
  CHECK(limit::room_for(L, 400 * MiB, 0) == 0);                 // over it
  CHECK(limit::room_for(L, -5 * static_cast<std::int64_t>(MiB), 0) == 56 * MiB);  // untouched pages: clamped
}

TEST_CASE("LOWTIDE_LIMIT: cgroup by default, 0 for none, a size; bad values warned about") {
  std::vector<std::string> warned;
  static std::vector<std::string>* sink = nullptr;
  sink = &warned;
  auto load = [](std::vector<const char*> env) {
    env.push_back(nullptr);
    Config c{};
    load_config(&c, env.data(), false, [](const char* e, const char* v, const char* r, const char* d) {
      sink->push_back(std::string(e) + "|" + v + "|" + r + "|" + d);
    });
    return c;
  };
  CHECK(load({}).get(Opt::limit) == kSizeWord);
  CHECK(load({"LOWTIDE_LIMIT=CGroup"}).get(Opt::limit) == kSizeWord);
  CHECK(load({"LOWTIDE_LIMIT=0"}).get(Opt::limit) == 0);
  CHECK(load({"LOWTIDE_LIMIT=64M"}).get(Opt::limit) == 64 * MiB);
  CHECK(std::string(load({}).str(Opt::cgroup_root)) == "/");
  CHECK(warned.empty());
  CHECK(load({"LOWTIDE_LIMIT=lots"}).get(Opt::limit) == kSizeWord);
  REQUIRE(warned.size() == 1);
  CHECK(warned[0].rfind("LOWTIDE_LIMIT|lots|", 0) == 0);
  CHECK(warned[0].find("|cgroup") != std::string::npos);
  char buf[80];
  describe_valid(*find_option("LOWTIDE_LIMIT"), buf, sizeof buf);
  CHECK(std::string(buf) == "cgroup or 0 B to 64 TiB");
}
