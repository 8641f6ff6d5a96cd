#include "symbolize.hpp"

#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>

#include "unwind.hpp"

namespace lowtide::symbolize {

namespace {
void copy_name(char* dst, std::size_t cap, const char* src) {
  std::size_t n = std::strlen(src);
  if (n >= cap) n = cap - 1;
  std::memcpy(dst, src, n);
  dst[n] = '\0';
}
}  // namespace

void frame(const sites::Frame& f, bool demangle, Symbol* s) {
  s->module = "?";
  s->offset = f.offset;
  s->function[0] = '\0';
  s->function_offset = 0;
  sites::ModuleInfo m = sites::module(f.module);
  if (m.path == nullptr) return;
  s->module = m.path;
  // Return addresses point after the call: look up the byte before, which
  // is still inside the calling function (a call may be its last insn).
  void* at = reinterpret_cast<void*>(f.ip - 1);
  dl_find_object r;
  if (::_dl_find_object(at, &r) != 0 || r.dlfo_link_map == nullptr) return;
  const link_map* lm = r.dlfo_link_map;
  const char* now = (lm->l_name != nullptr && lm->l_name[0] != '\0') ? lm->l_name : unwind::exe_path();
  if (lm->l_addr != m.bias || std::strcmp(now, m.path) != 0) return;
  Dl_info info;
  if (::dladdr(at, &info) == 0 || info.dli_sname == nullptr) return;
  s->function_offset = f.ip - reinterpret_cast<std::uintptr_t>(info.dli_saddr);
  if (demangle) {
    int status = 0;
    char* d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
    if (status == 0 && d != nullptr) {
      copy_name(s->function, sizeof s->function, d);
      std::free(d);
      return;
    }
    std::free(d);
  }
  copy_name(s->function, sizeof s->function, info.dli_sname);
}

}  // namespace lowtide::symbolize
