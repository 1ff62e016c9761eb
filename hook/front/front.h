#ifndef SFORGE_HOOK_FRONT_H
#define SFORGE_HOOK_FRONT_H
#include <stddef.h>

#include "allow.h"

// sforge_hook_front_args reports whether args (after the program name) are
// a poststop the Go hook reads without error: the stage, then --log and
// --engine with values, SFORGE_ENGINE empty or known.
int sforge_hook_front_args(int argc, char **args);
// sforge_hook_front_opts reads args as the front does for either stage: 1
// for an install (createRuntime, prestart), 2 for a poststop, 0 for
// anything the Go hook reads differently or refuses; *engine and *log are
// what the hook would use (pointers into args or the environment),
// *realtime whether its install window is real-time.
int sforge_hook_front_opts(int argc, char **args, const char **engine, const char **log, int *realtime);
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

// What the front decided for a createRuntime or prestart.
enum { DECIDE_GO = 0, DECIDE_NOTHING = 1, DECIDE_INSTALL = 2 };

struct sforge_hook_decision {
	char id[256];    // the container's id
	char netns[64];  // /proc/<pid>/ns/net
	char table[64];  // policy.ChainName(id)
	struct cfront_allowlist allow;
};

// sforge_hook_front_decide reads the state in buf and its bundle's
// config.json as hook.install does, up to the engine (see front.c).
int sforge_hook_front_decide(const char *buf, size_t len, const char *engine, const char *const *host,
                             struct sforge_hook_decision *d);
// Why the front left a createRuntime's install to the Go hook, or NULL.
extern const char *sforge_hook_front_left;

// What the front decided for a poststop whose namespace outlives the
// container.
enum { REMOVE_GO = 0, REMOVE_NOTHING = 1, REMOVE_TABLE = 2 };

struct sforge_hook_removal {
	char id[256];     // the container's id
	char netns[4096]; // the namespace's path in config.json
	char table[64];   // policy.ChainName(id)
};

// sforge_hook_front_decide_remove reads the state in buf and its bundle's
// config.json as hook.poststop does, up to the engine (see front.c).
int sforge_hook_front_decide_remove(const char *buf, size_t len, const char *engine, const char *const *host,
                                    struct sforge_hook_removal *d);
#endif
