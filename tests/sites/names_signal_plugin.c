/* names_signal's plugin: its constructor, run by dlopen with the loader's
 * lock held, waits in the program for a mutex the program's main thread
 * holds. */
#define _GNU_SOURCE
#include <dlfcn.h>

__attribute__((constructor)) static void plugin_ctor(void) {
  void (*ctor)(void);
  *(void**)&ctor = dlsym(RTLD_DEFAULT, "names_signal_plugin_ctor"); /* (ISO C has no cast for it) */
  if (ctor != 0) ctor();
}
