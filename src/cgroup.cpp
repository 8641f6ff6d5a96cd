#include "cgroup.hpp"

#include "platform.hpp"

namespace lowtide::cgroup {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Append [s, s+n) to out at *len, keeping room for the NUL. false if it does not fit.
bool append(char* out, std::size_t cap, std::size_t* len, const char* s, std::size_t n) {
  if (*len + n + 1 > cap) return false;
  for (std::size_t i = 0; i < n; ++i) out[(*len)++] = s[i];
  out[*len] = '\0';
  return true;
}

std::size_t length(const char* s) {
  std::size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}

bool equal(const char* a, std::size_t an, const char* b) {
  std::size_t i = 0;
  for (; i < an && b[i] != '\0'; ++i)
    if (a[i] != b[i]) return false;
  return i == an && b[i] == '\0';
}

// The end of the line starting at s.
const char* line_end(const char* s) {
  while (*s != '\0' && *s != '\n') ++s;
  return s;
}

// Does the comma-separated list [s, e) contain `word`?
bool list_has(const char* s, const char* e, const char* word) {
  while (s < e) {
    const char* c = s;
    while (c < e && *c != ',') ++c;
    if (equal(s, static_cast<std::size_t>(c - s), word)) return true;
    s = c + 1;
  }
  return false;
}

// A mountinfo field [s, e) into out, with the kernel's octal escapes of
// space, tab, newline and backslash (\040 ...) decoded.
bool unescape(const char* s, const char* e, char* out, std::size_t cap) {
  std::size_t n = 0;
  while (s < e) {
    char c = *s++;
    if (c == '\\' && e - s >= 3 && s[0] >= '0' && s[0] <= '3' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' &&
        s[2] <= '7') {
      c = static_cast<char>((s[0] - '0') * 64 + (s[1] - '0') * 8 + (s[2] - '0'));
      s += 3;
    }
    if (!append(out, cap, &n, &c, 1)) return false;
  }
  if (cap == 0) return false;
  out[n] = '\0';
  return true;
}

// Split a mountinfo line into fields at spaces: up to max fields, their
// starts and ends. Returns how many.
int fields(const char* s, const char* e, const char** start, const char** end, int max) {
  int n = 0;
  while (s < e && n < max) {
    while (s < e && *s == ' ') ++s;
    if (s == e) break;
    start[n] = s;
    while (s < e && *s != ' ') ++s;
    end[n++] = s;
  }
  return n;
}

// Read one limit file into *limit (lowered). true if the file said anything
// usable (a number or no limit); *refused set where it was not read for
// want of a window (pal::kNoWindow).
bool read_value(const char* path, std::uint64_t* limit, bool* refused) {
  char buf[64];
  const long got = pal::read_file(path, buf, sizeof buf);
  if (got == pal::kNoWindow) *refused = true;
  if (got <= 0) return false;
  std::uint64_t v = 0;
  switch (parse_value(buf, &v)) {
    case Value::bytes: *limit = lower(*limit, v == 0 ? 1 : v); return true;  // 0 bytes is a limit, not "none"
    case Value::unlimited: return true;
    case Value::bad: return false;
  }
  return false;
}

// root + rel, with a root of "/" (or "") adding nothing.
bool rooted(const char* root, const char* rel, char* out, std::size_t cap) {
  std::size_t n = 0;
  if (cap == 0) return false;
  out[0] = '\0';
  std::size_t rl = length(root);
  while (rl > 0 && root[rl - 1] == '/') --rl;
  return append(out, cap, &n, root, rl) && append(out, cap, &n, rel, length(rel));
}

}  // namespace

const char* source_name(Source s) {
  switch (s) {
    case Source::env: return "env";
    case Source::cgroup_v2: return "cgroup_v2";
    case Source::cgroup_v1: return "cgroup_v1";
    case Source::none: break;
  }
  return "none";
}

Value parse_value(const char* text, std::uint64_t* out) {
  const char* s = text;
  while (is_space(*s)) ++s;
  const char* e = s;
  while (*e != '\0' && !is_space(*e)) ++e;
  const char* rest = e;
  while (is_space(*rest)) ++rest;
  if (s == e || *rest != '\0') return Value::bad;
  if (equal(s, static_cast<std::size_t>(e - s), "max")) return Value::unlimited;
  std::uint64_t v = 0;
  for (const char* c = s; c < e; ++c) {
    if (*c < '0' || *c > '9') return Value::bad;
    // v1 writes "unlimited" as LONG_MAX rounded down to a page: anything from
    // 2^62 on is that (no machine has 4 EiB), and stops the number growing.
    if (v >= (std::uint64_t{1} << 62) / 10) return Value::unlimited;
    v = v * 10 + static_cast<std::uint64_t>(*c - '0');
  }
  if (v >= (std::uint64_t{1} << 62)) return Value::unlimited;
  *out = v;
  return Value::bytes;
}

bool own_path(const char* text, bool v2, char* out, std::size_t cap) {
  for (const char* s = text; *s != '\0';) {
    const char* e = line_end(s);
    // "hierarchy-id:controllers:path"
    const char* c1 = s;
    while (c1 < e && *c1 != ':') ++c1;
    const char* c2 = c1 < e ? c1 + 1 : e;
    while (c2 < e && *c2 != ':') ++c2;
    if (c2 < e) {
      bool match = v2 ? (equal(s, static_cast<std::size_t>(c1 - s), "0") && c2 == c1 + 1)
                      : list_has(c1 + 1, c2, "memory");
      if (match) {
        std::size_t n = 0;
        if (cap == 0) return false;
        out[0] = '\0';
        return c2 + 1 < e && append(out, cap, &n, c2 + 1, static_cast<std::size_t>(e - c2 - 1));
      }
    }
    s = *e == '\n' ? e + 1 : e;
  }
  return false;
}

bool find_mount(const char* mountinfo, bool v2, char* mount_point, std::size_t mcap, char* root, std::size_t rcap) {
  for (const char* s = mountinfo; *s != '\0';) {
    const char* e = line_end(s);
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    const char* b[32];
    const char* f[32];
    int n = fields(s, e, b, f, 32);
    int dash = -1;
    for (int i = 6; i < n; ++i) {
      if (f[i] - b[i] == 1 && *b[i] == '-') {
        dash = i;
        break;
      }
    }
    if (dash >= 0 && dash + 1 < n) {
      const auto type_len = static_cast<std::size_t>(f[dash + 1] - b[dash + 1]);
      bool match = v2 ? equal(b[dash + 1], type_len, "cgroup2")
                      : equal(b[dash + 1], type_len, "cgroup") && dash + 3 < n && list_has(b[dash + 3], f[dash + 3], "memory");
      if (match) return unescape(b[4], f[4], mount_point, mcap) && unescape(b[3], f[3], root, rcap);
    }
    s = *e == '\n' ? e + 1 : e;
  }
  return false;
}

bool directory(const char* mount_point, const char* root, const char* path, char* out, std::size_t cap) {
  if (cap == 0) return false;
  out[0] = '\0';
  std::size_t n = 0;
  std::size_t ml = length(mount_point);
  while (ml > 1 && mount_point[ml - 1] == '/') --ml;
  if (!append(out, cap, &n, mount_point, ml)) return false;
  // The part of path below root, component-wise ("/a" is not below "/ab").
  std::size_t rl = length(root);
  while (rl > 0 && root[rl - 1] == '/') --rl;
  std::size_t i = 0;
  while (i < rl && path[i] == root[i]) ++i;
  if (i < rl || (path[rl] != '\0' && path[rl] != '/')) return true;  // not below root: the mount itself
  const char* below = path + rl;
  std::size_t bl = length(below);
  while (bl > 0 && below[bl - 1] == '/') --bl;
  if (bl == 0) return true;
  if (n > 0 && out[n - 1] == '/') --n, out[n] = '\0';  // mount point "/": no "//"
  return append(out, cap, &n, below, bl);
}

namespace {

// This process's directory in one hierarchy (v2: the unified one, else v1's
// memory controller), its path there being `own`, under the mount that
// `mountinfo` names (nullptr: the file could not be read) or the
// conventional one.
bool place(const char* root, bool v2, const char* own, const char* mountinfo, Location* out) {
  char mount_point[Location::kPathMax] = {};
  char mount_root[Location::kPathMax] = {};
  const bool mounted = mountinfo != nullptr &&
                       find_mount(mountinfo, v2, mount_point, sizeof mount_point, mount_root, sizeof mount_root);
  if (!mounted) {
    // The conventional places, showing the whole hierarchy.
    const char* conventional = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory";
    std::size_t n = 0;
    if (!append(mount_point, sizeof mount_point, &n, conventional, length(conventional))) return false;
    mount_root[0] = '/';
    mount_root[1] = '\0';
  }
  // The mount point is as the process sees it; under a test's root it moves there.
  char base[Location::kPathMax] = {};
  if (!rooted(root, mount_point, base, sizeof base)) return false;
  if (!directory(base, mount_root, own, out->dir, sizeof out->dir)) return false;
  out->base_len = length(base);
  while (out->base_len > 1 && base[out->base_len - 1] == '/') --out->base_len;
  out->found = true;
  return true;
}

}  // namespace

std::uint64_t read_limit(const Location& loc, bool* refused) {
  bool no_window = false;
  if (refused != nullptr) *refused = false;
  if (!loc.found) return 0;
  char path[Location::kPathMax + 32];
  std::size_t len = length(loc.dir);
  std::uint64_t limit = 0;
  // This directory, then each parent down to the mount point (bounded: a
  // path has fewer components than bytes).
  for (int depth = 0; depth < 64; ++depth) {
    std::size_t n = 0;
    path[0] = '\0';
    if (!append(path, sizeof path, &n, loc.dir, len)) return limit;
    std::size_t dir_len = n;
    static constexpr const char* kV2[] = {"/memory.high", "/memory.max"};
    static constexpr const char* kV1[] = {"/memory.limit_in_bytes"};
    const char* const* names = loc.v2 ? kV2 : kV1;
    for (int i = 0; i < (loc.v2 ? 2 : 1); ++i) {
      n = dir_len;
      if (append(path, sizeof path, &n, names[i], length(names[i]))) read_value(path, &limit, &no_window);
    }
    if (no_window && refused != nullptr) *refused = true;
    if (len <= loc.base_len) break;
    while (len > loc.base_len && loc.dir[len - 1] != '/') --len;  // up one level
    if (len > loc.base_len) --len;                                // the '/' itself
    else len = loc.base_len;
  }
  return limit;
}

Found discover(const char* root, char* scratch, std::size_t cap, Location* v2, Location* v1) {
  *v2 = Location{};
  v2->v2 = true;
  *v1 = Location{};
  // Each file read once for both hierarchies: every process start pays for
  // them, and the kernel formats mountinfo afresh at each read (tens of KiB
  // on a host with many mounts).
  char path[Location::kPathMax] = {};
  char own2[Location::kPathMax] = {};
  char own1[Location::kPathMax] = {};
  bool have2 = false, have1 = false;
  bool refused = false;
  // A file's length, or 0; `refused` set where it was not read for want of
  // a window.
  const auto read = [&](const char* rel) -> long {
    if (!rooted(root, rel, path, sizeof path)) return 0;
    const long got = pal::read_file(path, scratch, cap);
    if (got == pal::kNoWindow) refused = true;
    return got > 0 ? got : 0;
  };
  if (read("/proc/self/cgroup") > 0) {
    have2 = own_path(scratch, true, own2, sizeof own2);
    have1 = own_path(scratch, false, own1, sizeof own1);
  }
  if (have2 || have1) {
    const bool mounts = read("/proc/self/mountinfo") > 0;
    if (have2) place(root, true, own2, mounts ? scratch : nullptr, v2);
    if (have1) place(root, false, own1, mounts ? scratch : nullptr, v1);
  }
  bool refused2 = false, refused1 = false;  // (read_limit sets its flag either way)
  if (std::uint64_t l = read_limit(*v2, &refused2); l != 0) return Found{l, Source::cgroup_v2, refused || refused2};
  const std::uint64_t l = read_limit(*v1, &refused1);
  return Found{l, l != 0 ? Source::cgroup_v1 : Source::none, refused || refused2 || refused1};
}

}  // namespace lowtide::cgroup
