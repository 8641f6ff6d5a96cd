#include "pyframes.hpp"

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
// its PyFrameObject begins PyObject_VAR_HEAD, f_back, f_code). The names
// are read in place from the code object (copy_str_in_place).
//
// 3.11: the API would make a frame object on demand for each interpreter
// frame (PyThreadState_GetFrame, PyFrame_GetBack), and doing that at an
// arbitrary malloc call (a frame being set up or cleared, a collection
// started by the new object) corrupts the interpreter: seen as a crash in
// frame_dealloc. So the interpreter's own frames are read where they are, as
// out-of-process profilers do, with 3.11's layout (release builds; the
// offsets below, from its headers), and nothing is allocated: the line from
// PyCode_Addr2Line, the names from the code object's str fields, their
// characters read in place too (copy_str_in_place).
//
// 3.12 and 3.13: the same in-place walk, with their layouts for the chain
// (the thread state's current frame, each frame's previous and owner) and
// their PyUnstable_InterpreterFrame_GetCode/GetLine for the rest; the names
// read in place as on 3.11 (the code object's fields where 3.11 has them,
// their str layout without 3.11's wstr). Later versions: no Python frames
// until their layout is added here.
//
// Nothing allocates, and it must not: the capture may be inside Python's
// own allocator. pymalloc grows its table of arenas with PyMem_RawRealloc,
// a large block that is captured, and an allocation by the capture (it
// asked PyObject_GetAttrString for the names, and PyUnicode_AsUTF8: the
// attribute's name, a non-ASCII name's UTF-8 copy, a UnicodeEncodeError for
// a lone surrogate) that needs a new arena reallocates the same table again
// from inside the first realloc, which then copies and frees a block
// already freed (docs/reliability.md no. 93). No object made, no error set,
// no collection: nothing to save and put back either.
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
  void (*incref)(Obj);
  void (*decref)(Obj);         // never of the last reference: each is also the interpreter's
  int (*addr2line)(Obj, int);  // PyCode_Addr2Line
  Obj (*iframe_code)(void*);    // PyUnstable_InterpreterFrame_GetCode, 3.12+: new reference
  int (*iframe_line)(void*);    // PyUnstable_InterpreterFrame_GetLine, 3.12+
  void* code_type;              // &PyCode_Type
  void* unicode_type;           // &PyUnicode_Type
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
// PyCodeObject.co_filename and .co_qualname on 3.11 (above), 3.12 and 3.13
// (cpython/code.h: the fields before them are the same); on 3.8-3.10
// co_filename and co_name (no co_qualname there), after seven ints and seven
// pointers.
constexpr std::size_t kCo38Filename = 104, kCo38Name = 112;
// str (cpython/unicodeobject.h, PEP 393), the compact forms only: where an
// ASCII string's characters start (sizeof(PyASCIIObject)) and the others'
// (sizeof(PyCompactUnicodeObject)); up to 3.11 a wstr pointer more in both
// and a state.ready bit that must be set (bit 7 is statically_allocated
// since).
constexpr std::size_t kStrLength = 16;  // PyASCIIObject.length
constexpr std::size_t kStrState = 32;   // .state (bit fields, below)
constexpr unsigned kStrKindShift = 2, kStrKindMask = 7, kStrCompact = 0x20, kStrAscii = 0x40, kStr311Ready = 0x80;
struct StrLayout {
  std::size_t ascii_data, compact_data;
  unsigned must;  // state bits that must be set
};
constexpr StrLayout kStr311{48, 72, kStrCompact | kStr311Ready};  // 3.8-3.11
constexpr StrLayout kStr312{40, 56, kStrCompact};

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
  look(self, api.incref, "Py_IncRef");
  look(self, api.decref, "Py_DecRef");
  look(self, api.addr2line, "PyCode_Addr2Line");
  look(self, api.iframe_code, "PyUnstable_InterpreterFrame_GetCode");
  look(self, api.iframe_line, "PyUnstable_InterpreterFrame_GetLine");
  api.code_type = ::dlsym(self, "PyCode_Type");
  api.unicode_type = ::dlsym(self, "PyUnicode_Type");
  const char* (*version)() = nullptr;
  look(self, version, "Py_GetVersion");
  bool common = api.is_initialized && api.gil_check && api.gil_this_thread && api.current_unchecked &&
                api.frame_line && api.incref && api.decref && api.code_type != nullptr &&
                api.unicode_type != nullptr && version;
  if (!common) return false;
  const char* v = version();
  if (v == nullptr) return false;
  auto is = [v](const char* p) { return std::strncmp(v, p, std::strlen(p)) == 0; };
  bool by_api = api.tstate_frame && api.frame_back && api.frame_code && (is("3.9.") || is("3.10."));
  raw38 = api.eval_frame && is("3.8.");
  // A debug build's objects have two more words in their header: another
  // layout (_Py_RefTotal exists only there).
  layout311 = is("3.11.") && api.addr2line != nullptr && ::dlsym(self, "_Py_RefTotal") == nullptr;
  if (api.iframe_code != nullptr && api.iframe_line != nullptr)
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

char* word(const void* base, std::size_t off) {
  void* v;
  std::memcpy(&v, static_cast<const char*>(base) + off, sizeof v);
  return static_cast<char*>(v);
}

// A str's characters as UTF-8 into dst[cap], read in place: nothing
// allocated, no Python called (see the top). The end of it if too long and
// tail (after "..."), else its head; cut between characters. "?" for what
// PyUnicode_AsUTF8 would refuse (a lone surrogate in the part kept) and for
// what is not a compact str of the exact type (a subclass's characters are
// elsewhere). Its header through pal::read_own_memory: were a code object's
// field not where this version's layout says, the word read there is
// refused rather than faulted on; once its type says str, its length and
// characters are its own.
void copy_str_in_place(const char* o, const StrLayout& lay, char* dst, std::size_t cap, bool tail) {
  std::memcpy(dst, "?", 2);
  char head[kStrState + sizeof(unsigned)];
  if (o == nullptr || !pal::read_own_memory(o, head, sizeof head) || word(head, kObType) != api.unicode_type) return;
  unsigned state;
  std::memcpy(&state, head + kStrState, sizeof state);
  const unsigned kind = (state >> kStrKindShift) & kStrKindMask;
  std::int64_t len;
  std::memcpy(&len, head + kStrLength, sizeof len);
  if ((state & lay.must) != lay.must || (kind != 1 && kind != 2 && kind != 4) || len < 0) return;
  const char* data = o + ((state & kStrAscii) != 0 ? lay.ascii_data : lay.compact_data);
  auto at = [data, kind](std::int64_t i) -> std::uint32_t {
    if (kind == 1) return static_cast<unsigned char>(data[i]);
    if (kind == 2) {
      std::uint16_t c;
      std::memcpy(&c, data + 2 * i, sizeof c);
      return c;
    }
    std::uint32_t c;
    std::memcpy(&c, data + 4 * i, sizeof c);
    return c;
  };
  // UTF-8 bytes of a character; 0 for a surrogate (or past U+10FFFF).
  auto bytes = [](std::uint32_t c) -> std::size_t {
    if (c < 0x80) return 1;
    if (c < 0x800) return 2;
    if (c >= 0xd800 && c <= 0xdfff) return 0;
    return c < 0x10000 ? 3 : c <= 0x10ffff ? 4 : 0;
  };
  // The characters kept, [from, to): as many as fit in cap - 1 bytes, else
  // (tail) as many of the last as fit after "...".
  std::int64_t from = 0, to = 0;
  std::size_t used = 0;
  bool cut = false;
  if (tail) {
    from = to = len;
    for (; from > 0; --from) {
      const std::size_t b = bytes(at(from - 1));
      if (b == 0) return;
      if (used + b > cap - 1) break;
      used += b;
    }
    cut = from > 0;
    for (; cut && used > cap - 4; ++from) used -= bytes(at(from));
  } else {
    for (; to < len; ++to) {
      const std::size_t b = bytes(at(to));
      if (b == 0) return;
      if (used + b > cap - 1) break;
      used += b;
    }
  }
  char* p = dst;
  if (cut) {
    std::memcpy(p, "...", 3);
    p += 3;
  }
  for (std::int64_t i = from; i < to; ++i) {
    const std::uint32_t c = at(i);
    if (c < 0x80) {
      *p++ = static_cast<char>(c);
    } else if (c < 0x800) {
      *p++ = static_cast<char>(0xc0 | (c >> 6));
      *p++ = static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      *p++ = static_cast<char>(0xe0 | (c >> 12));
      *p++ = static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      *p++ = static_cast<char>(0x80 | (c & 0x3f));
    } else {
      *p++ = static_cast<char>(0xf0 | (c >> 18));
      *p++ = static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      *p++ = static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      *p++ = static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  *p = '\0';
}

bool is_code(const void* o) { return o != nullptr && word(o, kObType) == api.code_type; }

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
    if (!is_code(code)) {  // a build whose objects differ (Py_TRACE_REFS)
      api.decref(code);
      break;
    }
    copy_str_in_place(word(code, kCo38Filename), kStr311, o.file, kFileMax, true);
    copy_str_in_place(word(code, kCo38Name), kStr311, o.name, kNameMax, false);
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
    copy_str_in_place(word(code, kCoFilename), kStr312, o.file, kFileMax, true);
    copy_str_in_place(word(code, kCoQualname), kStr312, o.name, kNameMax, false);
    api.decref(code);  // the frame's own reference remains: never the last
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
    copy_str_in_place(word(code, kCoFilename), kStr311, o.file, kFileMax, true);
    copy_str_in_place(word(code, kCoQualname), kStr311, o.name, kNameMax, false);
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
  if (layout311) {
    walk311(ts, out);
  } else if (layout_new != 0) {
    walk_new(ts, out);
  } else {
    walk_api(ts, out);
  }
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
