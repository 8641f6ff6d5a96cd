// The memory limit of the process's own cgroup: where its cgroup directory
// is (from /proc/self/cgroup and /proc/self/mountinfo) and what limit its
// files set. The parsing is pure functions over file contents, written into
// caller buffers without allocating (tests/unit/cgroup_test.cpp feeds them
// text); discover() and read_limit() read the files through pal::read_file,
// under a root directory that tests point at a fake tree.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lowtide::cgroup {

// Where the limit in effect came from (the report shows it).
enum class Source : unsigned { none, env, cgroup_v2, cgroup_v1 };
const char* source_name(Source s);  // "none", "env", "cgroup_v2", "cgroup_v1"

// What a limit file says: a number of bytes, no limit ("max" in v2; v1's
// "unlimited", a value of 2^62 or more, in practice LONG_MAX rounded down to
// a page), or nothing usable (empty, garbage: ignored as if absent).
enum class Value { bytes, unlimited, bad };
Value parse_value(const char* text, std::uint64_t* out);

// The process's cgroup path in the v2 hierarchy ("0::/path") or, for v1, in
// the hierarchy of the memory controller ("N:a,memory,b:/path"), copied
// into out (NUL-terminated). false if there is no such line or it does not
// fit.
bool own_path(const char* proc_self_cgroup, bool v2, char* out, std::size_t cap);

// In a /proc/self/mountinfo text, the first mount of the cgroup2 file
// system (v2) or of a v1 cgroup file system with the memory controller:
// its mount point and the cgroup path it shows (the root field), octal
// escapes (\040) decoded. false if none, or one does not fit.
bool find_mount(const char* mountinfo, bool v2, char* mount_point, std::size_t mcap, char* root,
                std::size_t rcap);

// The directory of cgroup `path` under a mount of `root` at mount_point:
// mount_point + the part of path below root. A path outside root (a
// container that sees its host's path but has its own cgroup mounted at
// the conventional place, without a cgroup namespace) gives mount_point
// itself. false if it does not fit.
bool directory(const char* mount_point, const char* root, const char* path, char* out, std::size_t cap);

// The lower of two limits, either of which may be 0 (= none).
inline std::uint64_t lower(std::uint64_t a, std::uint64_t b) {
  if (a == 0) return b;
  if (b == 0) return a;
  return a < b ? a : b;
}

// Where the limit files are: the process's cgroup directory and the mount
// point above which no ancestor is looked at.
struct Location {
  static constexpr std::size_t kPathMax = 512;
  bool found = false;
  bool v2 = false;
  char dir[kPathMax] = {};
  std::size_t base_len = 0;  // the mount point's length: the walk up stops there
};

// The limit the cgroup at loc sets: the lowest of memory.high and memory.max
// (v2) or memory.limit_in_bytes (v1) over its directory and its ancestors up
// to the mount point (a parent's limit binds its children). 0: none, or no
// file readable. *refused (if not null) is set where a file was not read
// for want of a fork-gate window (pal::kNoWindow): the answer is then not
// to be believed, and a re-read keeps the limit it had.
std::uint64_t read_limit(const Location& loc, bool* refused = nullptr);

// Find the cgroup directories of this process under `root` ("/" for the
// real system; a test's fake tree otherwise), the v2 hierarchy's and v1's
// memory controller's, from one read each of root/proc/self/cgroup and
// root/proc/self/mountinfo, or, where mountinfo names no such mount, the
// conventional mount point root/sys/fs/cgroup (v2) or
// root/sys/fs/cgroup/memory (v1). scratch holds the files while they are
// read (mountinfo can be long; a text cut at cap is searched as far as it
// goes). Then the limits, v2 first (in a hybrid v1/v2 system the v2
// hierarchy usually has no memory controller, so no files), then v1. 0 and
// Source::none if no cgroup sets a limit. `refused`: a file was not read
// for want of a fork-gate window (pal::kNoWindow; a program thread forking
// meanwhile): the places, and so the limit, are then not to be believed,
// and the caller discovers again later.
struct Found {
  std::uint64_t limit;
  Source source;
  bool refused = false;
};
Found discover(const char* root, char* scratch, std::size_t cap, Location* v2, Location* v1);

}  // namespace lowtide::cgroup
