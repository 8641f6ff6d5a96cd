#include "symbolize.hpp"

#include <cstdlib>
#include <cstring>
#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>

#include "unwind.hpp"

namespace lowtide::symbolize {

Symbol frame(const sites::Frame& f) {
  Symbol s{"?", f.offset, {}, 0};
  sites::ModuleInfo m = sites::module(f.module);
  if (m.path == nullptr) return s;
  s.module = m.path;
  // Return addresses point after the call: look up the byte before, which
  // is still inside the calling function (a call may be its last insn).
  void* at = reinterpret_cast<void*>(f.ip - 1);
  dl_find_object r;
  if (::_dl_find_object(at, &r) != 0 || r.dlfo_link_map == nullptr) return s;
  const link_map* lm = r.dlfo_link_map;
  const char* now = (lm->l_name != nullptr && lm->l_name[0] != '\0') ? lm->l_name : unwind::exe_path();
  if (lm->l_addr != m.bias || std::strcmp(now, m.path) != 0) return s;
  Dl_info info;
  if (::dladdr(at, &info) == 0 || info.dli_sname == nullptr) return s;
  s.function_offset = f.ip - reinterpret_cast<std::uintptr_t>(info.dli_saddr);
  int status = 0;
  char* d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  if (status == 0 && d != nullptr) s.function = d;
  else s.function = info.dli_sname;
  std::free(d);
  return s;
}

}  // namespace lowtide::symbolize
