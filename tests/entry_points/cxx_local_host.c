/* A C program (no C++ runtime in the process's global scope) that dlopens a
 * C++ library RTLD_LOCAL and has it exercise operator new's failure
 * contract: lowtide must find the library's runtime (src/cxxrt.hpp). Also
 * checks that lowtide itself brought no C++ runtime in: libstdc++ is loaded
 * only by the dlopen. Usage: cxx_local_host LIB */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  /* A sanitizer build of lowtide (scripts/test's UBSan run) needs libubsan,
   * which brings libstdc++ in globally: the lookup by RTLD_NOLOAD is then
   * not what is exercised, but the contract checks below still are. */
  const int sanitizer = dlopen("libubsan.so.1", RTLD_NOW | RTLD_NOLOAD) != NULL;
  if (sanitizer) printf("note: a sanitizer runtime brought libstdc++ in; its scope is global here\n");
  if (!sanitizer && dlopen("libstdc++.so.6", RTLD_NOW | RTLD_NOLOAD) != NULL) {
    printf("FAIL: libstdc++ is loaded before the C++ library is (lowtide should need no C++ runtime)\n");
    return 1;
  }
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    printf("FAIL: dlopen %s: %s\n", argv[1], dlerror());
    return 1;
  }
  if (!sanitizer && dlsym(RTLD_DEFAULT, "_ZSt15get_new_handlerv") != NULL) {
    printf("FAIL: the C++ runtime is in the global scope; the test needs it local\n");
    return 1;
  }
  int (*check)(size_t);
  void* sym = dlsym(h, "cxx_local_check");
  memcpy(&check, &sym, sizeof check); /* POSIX: function pointers fit in void* */
  if (sym == NULL) {
    printf("FAIL: no cxx_local_check in %s\n", argv[1]);
    return 1;
  }
  int r = check(SIZE_MAX - (2u << 20));
  if (r != 0) {
    printf("FAIL: check %d of cxx_local_check\n", r);
    return 1;
  }
  printf("ok\n");
  return 0;
}
