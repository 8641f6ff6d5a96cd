// Python lines in call sites (LOWTIDE_SITES with LOWTIDE_SITES_PYTHON=on):
// when the process is CPython (3.8 or later) and the thread whose large
// block is being captured holds the GIL, the capture also takes the
// innermost Python frames (file, line, function), through CPython's own C
// API found in the process with dlsym at start-up: no Python headers, no
// Python build needed, nothing loaded into a process that is not Python.
//
// The strings are interned in a fixed pool lowtide maps itself; a site's
// frames are kept by site id. A stack whose Python frames differ is another
// site (the frames are part of the site's hash): one C stack through the
// interpreter's eval loop serves every Python line.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lowtide::pyframes {

constexpr int kMaxFrames = 4;        // Python frames kept per site, innermost first
constexpr std::size_t kFileMax = 160;  // bytes kept of a file name (its end)
constexpr std::size_t kNameMax = 96;   // bytes kept of a function name

struct Captured {
  int n = 0;
  std::uint64_t hash = 0;  // of the frames' text; 0 when n == 0
  struct {
    char file[kFileMax];
    char name[kNameMax];
    int line;
  } f[kMaxFrames];
};

// From sites::start (the constructor): looks the API up in the process.
// Returns whether this is a CPython it can read.
bool start(bool wanted);
bool active();

// From sites' capture (inside malloc, lowtide's in-capture flag set, no
// lowtide lock held). Fills *out with nothing unless this thread holds the
// GIL. Nothing is allocated, no object made, no error set (the capture may
// be inside Python's own allocator: pyframes.cpp).
void capture(Captured* out);

// Under sites' insert lock, for a new site id: keeps the frames (interned).
void store(std::uint32_t site, const Captured& c);

// At report time: site id's frames, innermost first. file/name point into
// the pool (never freed); "?" when the pool was full.
struct Frame {
  const char* file;
  const char* name;
  int line;
};
int frames(std::uint32_t site, Frame* out, int max);

}  // namespace lowtide::pyframes
