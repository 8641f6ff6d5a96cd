#include "pyframes.hpp"

#include <atomic>
#include <cstring>
#include <dlfcn.h>

#include "platform.hpp"
#include "sites.hpp"

namespace lowtide::pyframes {

namespace {

// CPython's API as found in the process. Two ways to walk the frames:
//
// 3.8-3.10: through the API. Every frame there is an object already, so
// PyFrame_GetBack/GetCode hand out existing objects (3.8 has no accessors:
// its PyFrameObject begins PyObject_VAR_HEAD, f_back, f_code).
//
// 3.11: the API would make a frame object on demand for each interpreter
// frame (PyThreadState_GetFrame, PyFrame_GetBack), and doing that at an
// arbitrary malloc call (a frame being set up or cleared, a collection
// started by the new object) corrupts the interpreter: seen as a crash in
// frame_dealloc. So the interpreter's own frames are read where they are, as
// out-of-process profilers do, with 3.11's layout (release builds; the
// offsets below, from its headers), and nothing is allocated: the line from
// PyCode_Addr2Line, the names from the code object's str fields.
//
// 3.12 and 3.13: the same in-place walk, with their layouts for the chain
// (the thread state's current frame, each frame's previous and owner) and
// their PyUnstable_InterpreterFrame_GetCode/GetLine for the rest. Later
// versions: no Python frames until their layout is added here.
//
// Every code object met in place is checked to be one (its type is
// PyCode_Type) before it is used: a build whose layout differs (a debug or
// free-threaded build) yields no frames rather than garbage.
using Obj = void*;
struct Api {
  int (*is_initialized)();
  int (*gil_check)();
  Obj (*gil_this_thread)();   // PyGILState_GetThisThreadState
  Obj (*current_unchecked)(); // the thread state holding (3.8-3.11) / attached to this thread (3.12+)
  Obj (*tstate_frame)(Obj);   // PyThreadState_GetFrame, 3.9+: new reference
  Obj (*eval_frame)();        // PyEval_GetFrame, 3.8: borrowed
  Obj (*frame_back)(Obj);     // 3.9+: new reference
  Obj (*frame_code)(Obj);     // 3.9+: new reference
  int (*frame_line)(Obj);
  Obj (*getattr)(Obj, const char*);
  const char* (*utf8)(Obj);
  void (*incref)(Obj);
  void (*decref)(Obj);
  void (*err_fetch)(Obj*, Obj*, Obj*);
  void (*err_restore)(Obj, Obj, Obj);
  void (*err_clear)();
  int (*addr2line)(Obj, int);  // PyCode_Addr2Line
  Obj (*iframe_code)(void*);    // PyUnstable_InterpreterFrame_GetCode, 3.12+: new reference
  int (*iframe_line)(void*);    // PyUnstable_InterpreterFrame_GetLine, 3.12+
  void* code_type;              // &PyCode_Type
  int (*gc_disable)();          // PyGC_Disable, 3.10+: returns whether it was enabled
  int (*gc_enable)();           // PyGC_Enable, 3.10+
};
Api api{};
bool on = false;
bool raw38 = false;
constexpr std::size_t kRawBack = 3 * sizeof(void*), kRawCode = 4 * sizeof(void*);
bool layout311 = false;
// 3.11 (Include/cpython/pystate.h, internal/pycore_frame.h, cpython/code.h).
constexpr std::size_t kTsCframe = 56;        // PyThreadState.cframe
constexpr std::size_t kCfCurrent = 8;        // _PyCFrame.current_frame
constexpr std::size_t kFrCode = 32;          // _PyInterpreterFrame.f_code
constexpr std::size_t kFrPrevious = 48;      // .previous
constexpr std::size_t kFrPrevInstr = 56;     // .prev_instr
constexpr std::size_t kFrOwner = 69;         // .owner (1: a generator's)
constexpr std::size_t kCoFilename = 112;     // PyCodeObject.co_filename
constexpr std::size_t kCoQualname = 128;     // .co_qualname
constexpr std::size_t kCoFirstTraceable = 168;
constexpr std::size_t kCoCode = 184;         // .co_code_adaptive
// 3.12 and 3.13 (internal/pycore_frame.h, cpython/pystate.h).
int layout_new = 0;                          // 312 or 313
constexpr std::size_t kTs312Cframe = 56;     // PyThreadState.cframe (its current_frame at 0)
constexpr std::size_t kTs313Current = 72;    // PyThreadState.current_frame
constexpr std::size_t kFrNewPrevious = 8;    // _PyInterpreterFrame.previous
constexpr std::size_t kFrNewOwner = 70;      // .owner (3: a C stack's shim frame)
constexpr std::size_t kObType = 8;           // PyObject.ob_type in a default build
// co_qualname is 3.11+; co_name before (set at the first miss).
std::atomic<bool> qualname_missing{false};

// The pool: interned strings and each site's frames. Under sites' insert lock.
constexpr std::size_t kPool = std::size_t{512} * 1024;
constexpr std::uint32_t kSlots = 16384;  // intern table (offset + 1; 0 = empty)
struct SiteFrames {
  std::uint8_t n;
  struct {
    std::uint32_t file, name;  // offset + 1 in the pool; 0 = "?"
    std::int32_t line;
  } f[kMaxFrames];
};
char* pool = nullptr;
std::size_t pool_used = 0;
std::uint32_t* slots = nullptr;
SiteFrames* per_site = nullptr;

std::uint64_t fnv(const char* s, std::uint64_t h) {
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 0x100000001b3ULL;
  return (h ^ 0xff) * 0x100000001b3ULL;
}

std::uint32_t intern(const char* s) {
  std::uint64_t h = fnv(s, 0xcbf29ce484222325ULL);
  std::size_t len = std::strlen(s);
  for (std::uint32_t k = 0, i = static_cast<std::uint32_t>(h % kSlots); k < 64; ++k, i = (i + 1) % kSlots) {
    if (slots[i] == 0) {
      if (pool_used + len + 1 > kPool) return 0;
      std::memcpy(pool + pool_used, s, len + 1);
      slots[i] = static_cast<std::uint32_t>(pool_used + 1);
      pool_used += len + 1;
      return slots[i];
    }
    if (std::strcmp(pool + slots[i] - 1, s) == 0) return slots[i];
  }
  return 0;  // a long probe chain: the table is crowded, the name is dropped
}

template <typename F>
void look(void* self, F& fn, const char* name) {
  fn = reinterpret_cast<F>(::dlsym(self, name));
}

// Copies a str object's UTF-8 into dst (the end of it if too long: a path's
// tail names the file). Clears a failure.
void copy_str(Obj o, char* dst, std::size_t cap, bool tail) {
  dst[0] = '\0';
  if (o == nullptr) {
    api.err_clear();
    return;
  }
  const char* s = api.utf8(o);
  if (s == nullptr) {
    api.err_clear();
    std::memcpy(dst, "?", 2);
  } else {
    std::size_t n = std::strlen(s);
    if (n < cap) {
      std::memcpy(dst, s, n + 1);
    } else if (tail) {
      std::memcpy(dst, "...", 3);
      std::memcpy(dst + 3, s + n - (cap - 4), cap - 4);
      dst[cap - 1] = '\0';
    } else {
      std::memcpy(dst, s, cap - 1);
      dst[cap - 1] = '\0';
    }
  }
  api.decref(o);
}

void read_code(Obj code, char* file, char* name) {
  copy_str(api.getattr(code, "co_filename"), file, kFileMax, true);
  if (!qualname_missing.load(std::memory_order_relaxed)) {
    Obj q = api.getattr(code, "co_qualname");
    if (q != nullptr) {
      copy_str(q, name, kNameMax, false);
      return;
    }
    api.err_clear();
    qualname_missing.store(true, std::memory_order_relaxed);
  }
  copy_str(api.getattr(code, "co_name"), name, kNameMax, false);
}

}  // namespace

bool start(bool wanted) {
  if (!wanted) return false;
  void* self = RTLD_DEFAULT;
  look(self, api.is_initialized, "Py_IsInitialized");
  look(self, api.gil_check, "PyGILState_Check");
  look(self, api.gil_this_thread, "PyGILState_GetThisThreadState");
  look(self, api.current_unchecked, "PyThreadState_GetUnchecked");  // 3.13+
  if (api.current_unchecked == nullptr) look(self, api.current_unchecked, "_PyThreadState_UncheckedGet");
  look(self, api.tstate_frame, "PyThreadState_GetFrame");
  look(self, api.eval_frame, "PyEval_GetFrame");
  look(self, api.frame_back, "PyFrame_GetBack");
  look(self, api.frame_code, "PyFrame_GetCode");
  look(self, api.frame_line, "PyFrame_GetLineNumber");
  look(self, api.getattr, "PyObject_GetAttrString");
  look(self, api.utf8, "PyUnicode_AsUTF8");
  look(self, api.incref, "Py_IncRef");
  look(self, api.decref, "Py_DecRef");
  look(self, api.err_fetch, "PyErr_Fetch");
  look(self, api.err_restore, "PyErr_Restore");
  look(self, api.err_clear, "PyErr_Clear");
  look(self, api.addr2line, "PyCode_Addr2Line");
  look(self, api.iframe_code, "PyUnstable_InterpreterFrame_GetCode");
  look(self, api.iframe_line, "PyUnstable_InterpreterFrame_GetLine");
  look(self, api.gc_disable, "PyGC_Disable");
  look(self, api.gc_enable, "PyGC_Enable");
  api.code_type = ::dlsym(self, "PyCode_Type");
  const char* (*version)() = nullptr;
  look(self, version, "Py_GetVersion");
  bool common = api.is_initialized && api.gil_check && api.gil_this_thread && api.current_unchecked &&
                api.frame_line && api.getattr && api.utf8 && api.incref && api.decref && api.err_fetch &&
                api.err_restore && api.err_clear && version;
  if (!common) return false;
  const char* v = version();
  if (v == nullptr) return false;
  auto is = [v](const char* p) { return std::strncmp(v, p, std::strlen(p)) == 0; };
  bool by_api = api.tstate_frame && api.frame_back && api.frame_code && (is("3.9.") || is("3.10."));
  raw38 = api.eval_frame && is("3.8.");
  // A debug build's objects have two more words in their header: another
  // layout (_Py_RefTotal exists only there).
  layout311 = is("3.11.") && api.addr2line != nullptr && api.code_type != nullptr &&
              ::dlsym(self, "_Py_RefTotal") == nullptr;
  if (api.iframe_code != nullptr && api.iframe_line != nullptr && api.code_type != nullptr)
    layout_new = is("3.12.") ? 312 : is("3.13.") ? 313 : 0;
  if (!by_api && !raw38 && !layout311 && layout_new == 0) return false;
  std::size_t len = kPool + kSlots * sizeof(std::uint32_t) + sites::kSites * sizeof(SiteFrames);
  auto* m = static_cast<char*>(pal::map_lazy(len));
  if (m == nullptr) return false;
  pool = m;
  slots = reinterpret_cast<std::uint32_t*>(m + kPool);
  per_site = reinterpret_cast<SiteFrames*>(slots + kSlots);
  on = true;
  return true;
}

bool active() { return on; }

namespace {

void walk_api(Obj ts, Captured* out) {
  Obj f = nullptr;
  if (raw38) {
    f = api.eval_frame();
    if (f != nullptr) api.incref(f);
  } else {
    f = api.tstate_frame(ts);
  }
  while (f != nullptr && out->n < kMaxFrames) {
    auto& o = out->f[out->n];
    o.line = api.frame_line(f);
    Obj code = nullptr;
    if (raw38) {
      std::memcpy(&code, static_cast<char*>(f) + kRawCode, sizeof code);
      if (code != nullptr) api.incref(code);
    } else {
      code = api.frame_code(f);
    }
    if (code == nullptr) break;
    read_code(code, o.file, o.name);
    api.decref(code);
    ++out->n;
    Obj back = nullptr;
    if (raw38) {
      std::memcpy(&back, static_cast<char*>(f) + kRawBack, sizeof back);
      if (back != nullptr) api.incref(back);
    } else {
      back = api.frame_back(f);
    }
    api.decref(f);
    f = back;
  }
  if (f != nullptr) api.decref(f);
}

void copy_utf8(Obj o, char* dst, std::size_t cap, bool tail) {
  if (o == nullptr) {
    std::memcpy(dst, "?", 2);
    return;
  }
  api.incref(o);  // copy_str gives one reference back
  copy_str(o, dst, cap, tail);
}

char* word(const void* base, std::size_t off) {
  void* v;
  std::memcpy(&v, static_cast<const char*>(base) + off, sizeof v);
  return static_cast<char*>(v);
}

bool is_code(const void* o) { return o != nullptr && word(o, kObType) == api.code_type; }

void walk_new(Obj ts, Captured* out) {
  char* fr = layout_new == 312 ? word(ts, kTs312Cframe) : word(ts, kTs313Current);
  if (layout_new == 312 && fr != nullptr) fr = word(fr, 0);
  for (int hops = 0; fr != nullptr && out->n < kMaxFrames && hops < 1024; ++hops, fr = word(fr, kFrNewPrevious)) {
    if (fr[kFrNewOwner] == 3) continue;  // the C stack's shim: no Python code
    // f_code (3.12) or f_executable (3.13), both at offset 0.
    if (!is_code(word(fr, 0))) continue;
    Obj code = api.iframe_code(fr);
    if (code == nullptr) break;
    auto& o = out->f[out->n];
    o.line = api.iframe_line(fr);
    read_code(code, o.file, o.name);
    api.decref(code);
    ++out->n;
  }
}

void walk311(Obj ts, Captured* out) {
  char* cf = word(ts, kTsCframe);
  char* fr = cf != nullptr ? word(cf, kCfCurrent) : nullptr;
  // Bounded: a corrupt chain must not loop forever inside malloc.
  for (int hops = 0; fr != nullptr && out->n < kMaxFrames && hops < 1024; ++hops, fr = word(fr, kFrPrevious)) {
    char* code = word(fr, kFrCode);
    if (!is_code(code)) break;
    char* prev = word(fr, kFrPrevInstr);
    std::ptrdiff_t lasti_bytes = prev - (code + kCoCode);
    int first;
    std::memcpy(&first, code + kCoFirstTraceable, sizeof first);
    // Still in its prologue (CPython's _PyFrame_IsIncomplete): not shown
    // by CPython either.
    if (fr[kFrOwner] != 1 && lasti_bytes / 2 < first) continue;
    auto& o = out->f[out->n];
    o.line = api.addr2line(code, static_cast<int>(lasti_bytes));
    copy_utf8(word(code, kCoFilename), o.file, kFileMax, true);
    copy_utf8(word(code, kCoQualname), o.name, kNameMax, false);
    ++out->n;
  }
}

}  // namespace

void capture(Captured* out) {
  out->n = 0;
  out->hash = 0;
  if (!on || api.is_initialized() == 0) return;
  // Holding the GIL: this thread's own state is the one current. Both
  // checks, because PyGILState_Check answers 1 when it cannot tell (its
  // check disabled by sub-interpreters, or before initialisation).
  Obj ts = api.gil_this_thread();
  if (ts == nullptr || api.current_unchecked() != ts || api.gil_check() == 0) return;
  Obj et = nullptr, ev = nullptr, etb = nullptr;
  api.err_fetch(&et, &ev, &etb);
  // The collector held off: an object the walk makes (a UnicodeEncodeError
  // for a file name with a lone surrogate, an AttributeError) may start a
  // collection, which would run finalizers, arbitrary Python code, inside
  // the host's malloc call (a bytearray's += half-way through its resize).
  const bool gc_was_on = api.gc_disable != nullptr && api.gc_enable != nullptr && api.gc_disable() != 0;
  if (layout311) {
    walk311(ts, out);
  } else if (layout_new != 0) {
    walk_new(ts, out);
  } else {
    walk_api(ts, out);
  }
  if (gc_was_on) api.gc_enable();
  api.err_clear();
  api.err_restore(et, ev, etb);
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (int i = 0; i < out->n; ++i)
    h = fnv(out->f[i].file, fnv(out->f[i].name, h ^ static_cast<std::uint32_t>(out->f[i].line)));
  out->hash = out->n != 0 ? (h < 2 ? h + 2 : h) : 0;
}

void store(std::uint32_t site, const Captured& c) {
  if (!on || site >= sites::kSites) return;
  SiteFrames& s = per_site[site];
  for (int i = 0; i < c.n; ++i) {
    s.f[i].file = intern(c.f[i].file);
    s.f[i].name = intern(c.f[i].name);
    s.f[i].line = c.f[i].line;
  }
  s.n = static_cast<std::uint8_t>(c.n);
}

int frames(std::uint32_t site, Frame* out, int max) {
  if (!on || site >= sites::kSites) return 0;
  const SiteFrames& s = per_site[site];
  int n = s.n < max ? s.n : max;
  for (int i = 0; i < n; ++i)
    out[i] = {s.f[i].file ? pool + s.f[i].file - 1 : "?", s.f[i].name ? pool + s.f[i].name - 1 : "?", s.f[i].line};
  return n;
}

}  // namespace lowtide::pyframes
