/* lowtide: the C API the preloaded shim exports. Reach it from any process
 * running under LD_PRELOAD=liblowtide.so, e.g. from Python with
 * ctypes.CDLL(None).lowtide_version. */
#ifndef LOWTIDE_LOWTIDE_H
#define LOWTIDE_LOWTIDE_H

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version, e.g. "0.1.0". */
const char* lowtide_version(void);

#ifdef __cplusplus
}
#endif

#endif
