#ifndef SFORGE_HOOK_FRONT_H
#define SFORGE_HOOK_FRONT_H
#include <stddef.h>

// sforge_hook_front_args reports whether args (after the program name) are
// a poststop the Go hook reads without error: the stage, then --log and
// --engine with values, SFORGE_ENGINE empty or known.
int sforge_hook_front_args(int argc, char **args);
// sforge_hook_front_state reads the OCI state's bundle (NUL-terminated in
// bundle, size cap); 0 means "not sure".
int sforge_hook_front_state(const char *buf, size_t len, char *bundle, size_t cap);
// sforge_hook_front_spec reads config.json's network namespace: *net 0
// when it has none, else its path in path ("" for none); 0 means "not sure".
int sforge_hook_front_spec(const char *buf, size_t len, int *net, char *path, size_t cap);
// sforge_hook_front_idle reports whether the poststop of the container
// whose state is buf has nothing to do (its bundle's config.json read from
// the file system); 0 means the Go hook decides.
int sforge_hook_front_idle(const char *buf, size_t len);
#endif
