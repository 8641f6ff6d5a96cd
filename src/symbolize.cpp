#include "symbolize.hpp"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <dwarf.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <limits.h>
#include <link.h>
#include <type_traits>

#include "cxxrt.hpp"
#include "platform.hpp"
#include "unwind.hpp"

namespace lowtide::symbolize {

namespace {

void copy_name(char* dst, std::size_t cap, const char* src) {
  std::size_t n = std::strlen(src);
  if (n >= cap) n = cap - 1;
  std::memcpy(dst, src, n);
  dst[n] = '\0';
}

// libdw's entry points, looked up in the privately loaded library (only the
// header's types are used at build time: nothing links against libdw).
struct Dw {
  decltype(&::dwfl_begin) begin;
  decltype(&::dwfl_end) end;
  decltype(&::dwfl_report_begin_add) report_begin_add;
  decltype(&::dwfl_report_elf) report_elf;
  decltype(&::dwfl_report_end) report_end;
  decltype(&::dwfl_module_getelf) module_getelf;
  decltype(&::dwfl_module_build_id) module_build_id;
  decltype(&::dwfl_module_addrinfo) module_addrinfo;
  decltype(&::dwfl_module_getsrc) module_getsrc;
  decltype(&::dwfl_lineinfo) lineinfo;
  decltype(&::dwfl_build_id_find_debuginfo) build_id_find_debuginfo;
  decltype(&::elf_begin) elf_begin;  // libelf's, through libdw's handle
  decltype(&::elf_end) elf_end;
  decltype(&::dwelf_elf_gnu_build_id) elf_gnu_build_id;
  // zlib's crc32 (libelf's dependency), for .gnu_debuglink's CRC; nullptr
  // where it is not found: a module without a build ID then gets no debug
  // file by debuglink.
  unsigned long (*crc32)(unsigned long, const unsigned char*, unsigned);
  decltype(&::dwfl_module_addrdie) module_addrdie;
  decltype(&::dwarf_getscopes) getscopes;
  decltype(&::dwarf_tag) tag;
  decltype(&::dwarf_attr) attr;
  decltype(&::dwarf_formudata) formudata;
  decltype(&::dwarf_getsrcfiles) getsrcfiles;
  decltype(&::dwarf_filesrc) filesrc;
};
Dw dw{};
bool have_dw = false;
// The C++ runtime's demangler (cxxrt.hpp), found at start-up; names stay
// mangled without one.
cxxrt::DemangleFn demangler = nullptr;

// The Session's state: one at a time (busy), used only by its own thread.
constexpr std::uint32_t kCached = 1024;  // modules with a cached answer (sites' table holds as many)
enum : std::uint8_t { kUntried = 0, kReady = 1, kFailed = 2 };
std::atomic<bool> busy{false};
thread_local bool t_owner = false;  // this thread holds the Session (busy)
// The report running on this thread (the innermost: a signal handler's
// exit report may interrupt a report of the same thread) may use libdw.
// Not the same as t_owner: the interrupted report's Dwfl is half-way
// through a call, and the handler's report must not allocate.
thread_local bool t_session = false;
// The report running on this thread is on the signal/_exit path: no
// dladdr (see frame()).
thread_local bool t_no_loader = false;
Dwfl* dwfl = nullptr;
bool dwfl_failed = false;
Dwfl_Module* mods[kCached];
std::uint8_t mod_state[kCached];
char* debuginfo_path = nullptr;  // (read by libdw's standard search only: never run)

// Where a debug file is not found by build ID, libdw's standard search
// (dwfl_standard_find_debuginfo) ends, in elfutils 0.188, by dlopening
// debuginfod's client (libdebuginfod.so.1, which brings libcurl and its
// TLS, Kerberos and LDAP libraries, 29 objects on Debian 12, with their
// constructors and their allocations) into the process,
// whatever DEBUGINFOD_URLS says: from inside someone's program, often as it
// exits. So it is never called: a debug file is found by build ID
// (/usr/lib/debug/.build-id, dwfl_build_id_find_debuginfo, which also finds
// dwz's alt files by theirs) or by the object's .gnu_debuglink, searched
// here where GDB and libdw look by default, and no debuginfod server is
// ever asked, DEBUGINFOD_URLS set or not (nothing is left to skip).

// The GNU build ID of the ELF file open at fd equals bits[len].
bool same_build_id(int fd, const unsigned char* bits, int len) {
  // Read, not mapped: a file cut short meanwhile is an error, not SIGBUS.
  Elf* elf = dw.elf_begin(fd, ELF_C_READ, nullptr);
  if (elf == nullptr) return false;
  const void* id = nullptr;
  const ssize_t n = dw.elf_gnu_build_id(elf, &id);
  const bool same = n == len && std::memcmp(id, bits, static_cast<std::size_t>(len)) == 0;
  dw.elf_end(elf);
  return same;
}

// zlib's crc32 of the whole file open at fd (the .gnu_debuglink CRC) is crc.
bool same_crc(int fd, GElf_Word crc) {
  if (dw.crc32 == nullptr || crc == 0) return false;  // 0: nothing to check it by
  unsigned char buf[8192];
  unsigned long sum = dw.crc32(0, nullptr, 0);
  std::uint64_t off = 0;
  for (;;) {
    const long n = pal::read_at(fd, buf, sizeof buf, off);
    if (n < 0) return false;
    if (n == 0) break;
    sum = dw.crc32(sum, buf, static_cast<unsigned>(n));
    off += static_cast<std::uint64_t>(n);
  }
  return static_cast<GElf_Word>(sum) == crc;
}

struct FileId {
  bool known = false;
  std::uint64_t dev = 0, ino = 0;
};

// The debug file `link` for the main file at `path`: in path's directory,
// its .debug/ subdirectory, and /usr/lib/debug/ followed by path's
// directory (GDB's and libdw's default places, in their order). A
// candidate that is the main file itself is skipped; one is taken only
// where it is the module's: the same build ID where the module has one,
// else the debuglink's CRC. The fd (read only, O_CLOEXEC) or -1.
int debuglink_in(Dwfl_Module* mod, const char* path, const char* link, GElf_Word crc, const FileId& main_file,
                 char** found) {
  const char* slash = std::strrchr(path, '/');
  const std::size_t dir_len = slash == nullptr ? 0 : static_cast<std::size_t>(slash - path);
  const unsigned char* bits = nullptr;
  GElf_Addr at = 0;
  const int bits_len = dw.module_build_id(mod, &bits, &at);
  static constexpr const char* kPlaces[][2] = {{"", "/"}, {"", "/.debug/"}, {"/usr/lib/debug", "/"}};
  for (const auto& place : kPlaces) {
    if (place[0][0] != '\0' && path[0] != '/') continue;  // a relative path has no place under /usr/lib/debug
    char cand[PATH_MAX];
    const std::size_t pre = std::strlen(place[0]), mid = std::strlen(place[1]), tail = std::strlen(link);
    if (slash == nullptr && pre == 0) {
      // A bare file name: the current directory's (as libdw, which looks
      // there only for such a path).
      if (mid + tail >= sizeof cand) continue;
      std::memcpy(cand, place[1] + 1, mid - 1);
      std::memcpy(cand + mid - 1, link, tail + 1);
    } else {
      if (pre + dir_len + mid + tail >= sizeof cand) continue;
      std::memcpy(cand, place[0], pre);
      std::memcpy(cand + pre, path, dir_len);
      std::memcpy(cand + pre + dir_len, place[1], mid);
      std::memcpy(cand + pre + dir_len + mid, link, tail + 1);
    }
    std::uint64_t dev = 0, ino = 0;
    const int fd = pal::open_debug_file(cand, &dev, &ino);
    if (fd < 0) continue;
    const bool is_main = main_file.known && dev == main_file.dev && ino == main_file.ino;
    if (!is_main && (bits_len > 0 ? same_build_id(fd, bits, bits_len) : same_crc(fd, crc))) {
      // libdw frees the name with the module (dwfl_end); without it, the
      // fd is enough.
      *found = ::strdup(cand);
      return fd;
    }
    pal::close_fd(fd);
  }
  return -1;
}

int find_debuginfo(Dwfl_Module* mod, void** user, const char* name, Dwarf_Addr base, const char* file,
                   const char* link, GElf_Word crc, char** found) {
  int fd = dw.build_id_find_debuginfo(mod, user, name, base, file, link, crc, found);
  if (fd >= 0) return fd;
  // No debuglink (libdw's standard search then makes up FILE.debug:
  // lowtide does not), or no file to look beside.
  if (link == nullptr || link[0] == '\0' || file == nullptr || file[0] == '\0') return -1;
  FileId main_file;
  main_file.known = pal::file_identity(file, &main_file.dev, &main_file.ino);
  fd = debuglink_in(mod, file, link, crc, main_file, found);
  if (fd >= 0) return fd;
  // A path through a symbolic link (/lib on a merged /usr): the debug file
  // may be filed under the real one, as libdw's search also tries.
  char real[PATH_MAX];
  if (!pal::real_path(file, real, sizeof real) || std::strcmp(real, file) == 0) return -1;
  return debuglink_in(mod, real, link, crc, main_file, found);
}

// Every module is reported with its file (dwfl_report_elf): there is never
// another file to find, and nothing is looked up elsewhere.
int find_elf(Dwfl_Module*, void**, const char*, Dwarf_Addr, char**, Elf**) { return -1; }

const Dwfl_Callbacks callbacks = {find_elf, find_debuginfo, nullptr, &debuginfo_path};

// The longest build ID compared (GNU ld's are 20 bytes, 16 with md5 or
// uuid, 8 with xxhash); an object with a longer one is not named by libdw.
constexpr std::size_t kMaxBuildId = 64;

// The GNU build ID of a loaded object (load bias `bias`), read from its
// notes in memory (the first PT_LOAD maps the ELF header and program
// headers, as every linker lays them out; anything else is refused) into
// bits[kMaxBuildId]. Every byte through pal::read_own_memory: another thread
// may dlclose the object after _dl_find_object found it, and its pages are
// then gone (a plain read would kill the process with SIGSEGV). false where
// something could not be read or is not as expected; true with *len 0 for
// an object without a build ID. No lock, no allocation.
bool memory_build_id(const dl_find_object& r, std::uintptr_t bias, unsigned char* bits, std::size_t* len) {
  auto lo = reinterpret_cast<std::uintptr_t>(r.dlfo_map_start);
  auto hi = reinterpret_cast<std::uintptr_t>(r.dlfo_map_end);
  auto read = [](std::uintptr_t at, void* to, std::size_t n) {
    return pal::read_own_memory(reinterpret_cast<const void*>(at), to, n);
  };
  *len = 0;
  ElfW(Ehdr) eh;
  if (hi - lo < sizeof eh || !read(lo, &eh, sizeof eh)) return false;
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_phentsize != sizeof(ElfW(Phdr))) return false;
  if (eh.e_phoff > hi - lo || eh.e_phnum > (hi - lo - eh.e_phoff) / sizeof(ElfW(Phdr))) return false;
  ElfW(Phdr) ph[16];  // read 16 at a time
  for (unsigned first = 0; first < eh.e_phnum; first += 16) {
    const unsigned k = eh.e_phnum - first < 16 ? eh.e_phnum - first : 16;
    if (!read(lo + eh.e_phoff + first * sizeof ph[0], ph, k * sizeof ph[0])) return false;
    for (unsigned i = 0; i < k; ++i) {
      if (ph[i].p_type != PT_NOTE) continue;
      std::uintptr_t p = bias + ph[i].p_vaddr, end = p + ph[i].p_memsz;
      if (p < lo || end > hi || end < p) continue;
      while (end - p >= sizeof(ElfW(Nhdr))) {
        ElfW(Nhdr) n;
        if (!read(p, &n, sizeof n)) return false;
        std::uintptr_t name = p + sizeof n;
        std::uintptr_t desc = name + ((n.n_namesz + 3u) & ~std::uintptr_t{3});
        std::uintptr_t next = desc + ((n.n_descsz + 3u) & ~std::uintptr_t{3});
        if (next > end || next <= p) break;
        char gnu[4];
        if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4) {
          if (!read(name, gnu, sizeof gnu)) return false;
          if (std::memcmp(gnu, "GNU", 4) == 0) {
            if (n.n_descsz > kMaxBuildId || !read(desc, bits, n.n_descsz)) return false;
            *len = n.n_descsz;
            return true;
          }
        }
        p = next;
      }
    }
  }
  return true;  // a valid object without a build ID
}

// The module for sites' module index i, reported to the Session's Dwfl at
// its real load bias (it is loaded there now: checked by the caller), or
// nullptr. The file's build ID must be the one in memory: a library
// upgraded on disk while the process runs is not the code that ran.
Dwfl_Module* module_for(std::uint32_t i, const char* path, std::uintptr_t bias, const dl_find_object& r) {
  if (i < kCached && mod_state[i] != kUntried) return mod_state[i] == kReady ? mods[i] : nullptr;
  Dwfl_Module* m = nullptr;
  unsigned char want[kMaxBuildId];
  std::size_t want_len = 0;
  if (dwfl == nullptr && !dwfl_failed) {
    dwfl = dw.begin(&callbacks);
    dwfl_failed = dwfl == nullptr;
  }
  if (dwfl != nullptr && memory_build_id(r, bias, want, &want_len)) {
    dw.report_begin_add(dwfl);
    m = dw.report_elf(dwfl, path, path, -1, bias, false);
    dw.report_end(dwfl, nullptr, nullptr);
    if (m != nullptr) {
      Dwarf_Addr elf_bias = 0;
      const unsigned char* have = nullptr;
      GElf_Addr at = 0;
      int have_len = dw.module_getelf(m, &elf_bias) != nullptr ? dw.module_build_id(m, &have, &at) : -1;
      bool same = have_len >= 0 && static_cast<std::size_t>(have_len) == want_len &&
                  (want_len == 0 || std::memcmp(have, want, want_len) == 0);
      if (!same) m = nullptr;  // stays reported, never asked
    }
  }
  if (i < kCached) {
    mods[i] = m;
    mod_state[i] = m != nullptr ? kReady : kFailed;
  }
  return m;
}

// The longest mangled name demangled; longer ones are left mangled. The
// demangler recurses and keeps its state on the stack, ~72 bytes of it per
// character of the name: 2048 characters take ~150 KiB, within the 512 KiB
// the threads that write reports have beyond their TLS (pal::start_thread
// callers in live.cpp and periodic.cpp) with room left for libdw. Without
// the bound a name the program chose (template arguments nest without
// limit) could overflow that stack and crash the process. A demangled name
// that long would not fit Symbol::function anyway.
constexpr std::size_t kMaxDemangle = 2048;

void set_function(Symbol* s, const char* name, bool demangle) {
  if (demangle && std::strlen(name) <= kMaxDemangle) {
    int status = 0;
    char* d = demangler != nullptr ? demangler(name, nullptr, nullptr, &status) : nullptr;
    if (status == 0 && d != nullptr) {
      copy_name(s->function, sizeof s->function, d);
      std::free(d);
      return;
    }
    std::free(d);
  }
  copy_name(s->function, sizeof s->function, name);
}

// Where the address is inlined code, the line table names the innermost
// inlined function's line (PyMem_Realloc's, inside PyByteArray_Resize): the
// line of the named function is the outermost inlined call's call site.
// false when the address is not in inlined code (or there is no DWARF).
bool call_site_line(Dwfl_Module* m, std::uintptr_t at, Symbol* s) {
  Dwarf_Addr bias = 0;
  Dwarf_Die* cu = dw.module_addrdie(m, at, &bias);
  if (cu == nullptr) return false;
  Dwarf_Die* scopes = nullptr;
  int n = dw.getscopes(cu, at - bias, &scopes);
  bool found = false;
  for (int i = n - 1; i >= 0 && !found; --i) {
    if (dw.tag(&scopes[i]) != DW_TAG_inlined_subroutine) continue;
    Dwarf_Attribute a;
    Dwarf_Word file = 0, line = 0;
    if (dw.attr(&scopes[i], DW_AT_call_file, &a) == nullptr || dw.formudata(&a, &file) != 0) break;
    if (dw.attr(&scopes[i], DW_AT_call_line, &a) == nullptr || dw.formudata(&a, &line) != 0 || line == 0) break;
    Dwarf_Files* files = nullptr;
    std::size_t nfiles = 0;
    if (dw.getsrcfiles(cu, &files, &nfiles) != 0 || file >= nfiles) break;
    const char* name = dw.filesrc(files, file, nullptr, nullptr);
    if (name == nullptr || line > INT32_MAX) break;
    copy_name(s->file, sizeof s->file, name);
    s->line = static_cast<int>(line);
    found = true;
  }
  std::free(scopes);
  return found;
}

// libdw's answer for the address: function (from .symtab or .dynsym) and,
// with DWARF, file:line. false when it has no function name.
bool from_libdw(const sites::Frame& f, std::uintptr_t at, const char* path, std::uintptr_t bias,
                const dl_find_object& r, bool demangle, Symbol* s) {
  if (!have_dw || !t_session) return false;
  Dwfl_Module* m = module_for(f.module, path, bias, r);
  if (m == nullptr) return false;
  GElf_Off off = 0;
  GElf_Sym sym;
  const char* name = dw.module_addrinfo(m, at, &off, &sym, nullptr, nullptr, nullptr);
  if (name == nullptr || name[0] == '\0') return false;
  set_function(s, name, demangle);
  s->function_offset = off + 1;  // of the return address, as dladdr's
  if (!call_site_line(m, at, s)) {
    if (Dwfl_Line* line = dw.module_getsrc(m, at); line != nullptr) {
      int ln = 0;
      const char* file = dw.lineinfo(line, nullptr, &ln, nullptr, nullptr, nullptr);
      if (file != nullptr && ln > 0) {
        copy_name(s->file, sizeof s->file, file);
        s->line = ln;
      }
    }
  }
  return true;
}

}  // namespace

bool load() {
  demangler = cxxrt::resolve_demangler();
  void* h = ::dlopen("libdw.so.1", RTLD_LOCAL | RTLD_NOW);
  if (h == nullptr) return false;
  Dw d{};
  bool ok = true;
  auto get = [&](auto& fn, const char* name) {
    void* p = ::dlsym(h, name);
    ok = ok && p != nullptr;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  get(d.begin, "dwfl_begin");
  get(d.end, "dwfl_end");
  get(d.report_begin_add, "dwfl_report_begin_add");
  get(d.report_elf, "dwfl_report_elf");
  get(d.report_end, "dwfl_report_end");
  get(d.module_getelf, "dwfl_module_getelf");
  get(d.module_build_id, "dwfl_module_build_id");
  get(d.module_addrinfo, "dwfl_module_addrinfo");
  get(d.module_getsrc, "dwfl_module_getsrc");
  get(d.lineinfo, "dwfl_lineinfo");
  get(d.build_id_find_debuginfo, "dwfl_build_id_find_debuginfo");
  get(d.elf_begin, "elf_begin");
  get(d.elf_end, "elf_end");
  get(d.elf_gnu_build_id, "dwelf_elf_gnu_build_id");
  get(d.module_addrdie, "dwfl_module_addrdie");
  get(d.getscopes, "dwarf_getscopes");
  get(d.tag, "dwarf_tag");
  get(d.attr, "dwarf_attr");
  get(d.formudata, "dwarf_formudata");
  get(d.getsrcfiles, "dwarf_getsrcfiles");
  get(d.filesrc, "dwarf_filesrc");
  if (!ok) return false;
  // Optional (see Dw::crc32): dlsym on libdw's handle searches its
  // dependencies too (libelf's libz).
  d.crc32 = reinterpret_cast<decltype(d.crc32)>(::dlsym(h, "crc32"));
  dw = d;
  have_dw = true;
  return true;
}

Session::Session(bool allowed, bool loader) : outer_session_(t_session), outer_no_loader_(t_no_loader) {
  // Whatever report this one interrupted, it decides for itself: restored
  // by the destructor.
  t_session = false;
  t_no_loader = !loader;
  if (!allowed || !have_dw || busy.exchange(true, std::memory_order_acquire)) return;
  owner_ = true;
  t_owner = true;
  t_session = true;
  dwfl = nullptr;
  dwfl_failed = false;
  std::memset(mod_state, 0, sizeof mod_state);
}

Session::~Session() {
  if (owner_) {
    if (dwfl != nullptr) dw.end(dwfl);
    dwfl = nullptr;
    t_owner = false;
    busy.store(false, std::memory_order_release);
  }
  t_session = outer_session_;
  t_no_loader = outer_no_loader_;
}

void fork_child() {
  if (t_owner) return;  // the forking thread's own Session goes on
  dwfl = nullptr;
  busy.store(false, std::memory_order_release);
}

void frame(const sites::Frame& f, bool demangle, Symbol* s) {
  s->module = "?";
  s->offset = f.offset;
  s->function[0] = '\0';
  s->function_offset = 0;
  s->file[0] = '\0';
  s->line = 0;
  sites::ModuleInfo m = sites::module(f.module);
  if (m.path == nullptr) return;
  s->module = m.path;
  // Return addresses point after the call: look up the byte before, which
  // is still inside the calling function (a call may be its last insn).
  std::uintptr_t at = f.ip - 1;
  dl_find_object r;
  if (::_dl_find_object(reinterpret_cast<void*>(at), &r) != 0 || r.dlfo_link_map == nullptr) return;
  // Still the object the site was seen in (same bias, same path)? Its
  // link_map and name are read with pal::read_own_memory, as its headers
  // are by memory_build_id: another thread may dlclose it at any moment
  // (freeing the first two, unmapping the rest), and a plain read would
  // then kill the process. What cannot be read leaves module+offset.
  link_map lm{};  // its head only: l_addr and l_name
  static_assert(offsetof(link_map, l_name) == sizeof lm.l_addr);
  if (!pal::read_own_memory(r.dlfo_link_map, &lm, sizeof lm.l_addr + sizeof lm.l_name) || lm.l_addr != m.bias) return;
  char first = '\0';
  if (lm.l_name != nullptr && !pal::read_own_memory(lm.l_name, &first, 1)) return;
  if (first != '\0' ? pal::own_string_is(lm.l_name, m.path) != 1 : std::strcmp(unwind::exe_path(), m.path) != 0) return;
  if (from_libdw(f, at, m.path, m.bias, r, demangle, s)) return;
  // dladdr takes the loader's lock (dl_load_lock), which a thread inside
  // dlopen holds while a constructor runs: from a signal handler or _exit
  // that wait may never end (the constructor waiting for a lock the
  // signalled thread holds). There the frame stays module+offset, checked
  // above with _dl_find_object, which takes no lock.
  if (t_no_loader) return;
  Dl_info info;
  if (::dladdr(reinterpret_cast<void*>(at), &info) == 0 || info.dli_sname == nullptr) return;
  // dli_sname points into the object's string table, in its mapped pages:
  // dladdr holds the loader's lock only while it runs, and a dlclose by
  // another thread right after it returns unmaps them. Copied with
  // pal::read_own_memory (a longer name: its head, left mangled as
  // set_function leaves it); what cannot be read leaves module+offset.
  char name[kMaxDemangle + 2];
  if (pal::read_own_string(info.dli_sname, name, sizeof name) < 0) {
    if (!pal::read_own_memory(info.dli_sname, name, sizeof name - 1)) return;
    name[sizeof name - 1] = '\0';
  }
  s->function_offset = f.ip - reinterpret_cast<std::uintptr_t>(info.dli_saddr);
  set_function(s, name, demangle);
}

}  // namespace lowtide::symbolize
