/* SIGTERM while a report is being written (lowtide's handler writes the
 * exit report from it, names from neither libdw nor dladdr):
 *
 *   names_signal report PATH   the signal lands on the thread writing a
 *       report (lowtide_write_report(PATH)) while it holds libdw's Session:
 *       raised from inside the demangler it calls (__cxa_demangle, defined
 *       here: lowtide takes the program's)
 *   names_signal dlopen PLUGIN another thread is inside dlopen(PLUGIN), the
 *       loader's lock held, its constructor waiting for a mutex this thread
 *       holds while the signal lands
 *
 * Neither returns: the process ends by SIGTERM. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void names_run(void** out);

static volatile sig_atomic_t armed;

char* __cxa_demangle(const char* mangled, char* buf, size_t* n, int* status) {
  (void)mangled;
  (void)buf;
  (void)n;
  if (armed) {
    armed = 0;
    raise(SIGTERM);
  }
  if (status != NULL) *status = -2; /* not a mangled name */
  return NULL;
}

static pthread_mutex_t plugin_mu = PTHREAD_MUTEX_INITIALIZER;
static sem_t plugin_started;

/* Called by the plugin's constructor (found with dlsym), with the loader's
 * lock held: says it is there, then waits for the mutex main holds. */
void names_signal_plugin_ctor(void) {
  sem_post(&plugin_started);
  pthread_mutex_lock(&plugin_mu);
  pthread_mutex_unlock(&plugin_mu);
}

static void* loader(void* path) {
  if (dlopen(path, RTLD_NOW) == NULL) fprintf(stderr, "dlopen: %s\n", dlerror());
  return NULL;
}

int main(int argc, char** argv) {
  alarm(60);
  if (argc != 3) return 2;
  void* blocks[3];
  names_run(blocks);
  if (strcmp(argv[1], "report") == 0) {
    int (*write_report)(const char*, int);
    *(void**)&write_report = dlsym(RTLD_DEFAULT, "lowtide_write_report"); /* (ISO C has no cast for it) */
    if (write_report == NULL) return 2;
    armed = 1;
    write_report(argv[2], 0);
    return 3;
  }
  if (strcmp(argv[1], "dlopen") == 0) {
    sem_init(&plugin_started, 0, 0);
    pthread_mutex_lock(&plugin_mu);
    pthread_t t;
    if (pthread_create(&t, NULL, loader, argv[2]) != 0) return 2;
    while (sem_wait(&plugin_started) != 0) {
    }
    raise(SIGTERM);
    pthread_mutex_unlock(&plugin_mu);
    pthread_join(t, NULL);
    return 3;
  }
  return 2;
}
