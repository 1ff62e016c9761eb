#ifndef SFORGE_FRONT_H
#define SFORGE_FRONT_H
#include <stddef.h>
#include <time.h>

#include "allow.h"

// The hook binary the shim adds to specs, looked for next to the shim
// (shim.HookName).
#define SFORGE_HOOK_NAME "sforge-hook"

// What the front reads from the settings file and the environment.
struct sforge_front_cfg {
	char runtime[4096];
	char engine[16]; // $SFORGE_ENGINE, else the file's ("" for auto)
	char log[4096];  // the shim's own log, "" for none
	char hook[4096]; // the file's sforge-hook, "" for the default (sforge_front_hook)
	long hook_timeout; // the file's hookTimeout (0 when absent)
	char priority[16]; // $SFORGE_INSTALL_PRIORITY, else the file's installPriority ("" for realtime)
};

// The arguments of create/run the front reads (shim.ParseArgs).
struct sforge_front_create_args {
	const char *bundle;   // "" for the working directory
	const char *pid_file; // NULL when not given
	const char *id;       // the first positional argument
	int positional;       // how many there are
};

// sforge_front_command returns the index of the subcommand in args when it
// is one the front execs straight away or create/run, -1 otherwise.
int sforge_front_command(int argc, char **args);
// sforge_front_create_args reads the arguments after create/run; 0 means
// "not sure".
int sforge_front_create_args(int argc, char **args, struct sforge_front_create_args *c);
// sforge_front_bundle reads the bundle ("" for the working directory) from
// the arguments after create/run; 0 means "not sure".
int sforge_front_bundle(int argc, char **args, const char **bundle);
// sforge_front_mentions reports whether a config.json may hold anything of
// sforge's (RawSpec.MentionsSforge).
int sforge_front_mentions(const char *buf, size_t len);
// sforge_front_config parses a settings file; 0 means "not sure".
int sforge_front_config(const char *buf, size_t len, struct sforge_front_cfg *c);
// sforge_front_runtime fills c from the settings and the environment; 0
// means the Go shim must decide.
int sforge_front_runtime(struct sforge_front_cfg *c);
// sforge_front_hook writes the sforge-hook the shim adds to specs into
// out (Config.Hook: the file's, else the one next to the shim's own
// executable); 0 means the Go shim must find it.
int sforge_front_hook(const struct sforge_front_cfg *c, char *out, size_t cap);
// sforge_front_runc_log reads runc's --log and --log-format (NULL when
// absent) from its global flags, argv[1] up to the subcommand at cmd, as
// ParseArgs does; the command line is one sforge_front_command accepted.
void sforge_front_runc_log(char **argv, int cmd, const char **log, const char **format);
// sforge_front_list returns the i-th entry of a list the front holds (0:
// engine names, 1: the usual runc locations, 2: install priorities), NULL
// past its end.
const char *sforge_front_list(int list, int i);

// What the front installs for an isolated create (create.c).
struct sforge_front_plan {
	char id[256];
	char table[64]; // policy.ChainName(id)
	const char *pid_file;
	const char *bundle; // "" for the working directory
	// The network namespace the spec names by path, "" for one of the
	// container's own.
	char netns[4096];
	// The spec as the shim writes it before runc create: without
	// CAP_NET_RAW, with the poststop hook for a namespace by path
	// (malloc'd; NULL when it needs no change).
	char *edited;
	size_t edited_n;
	// Where the allowlist is in the spec (policy.Lookup's choice), for
	// the tests.
	size_t value_off, value_n;
	struct cfront_allowlist allow;
};

// sforge_front_plan_create decides whether the front does an isolated
// create itself: args are the arguments after "create", spec the bundle's
// config.json, c the settings (the effective engine; the hook and its
// timeout for a namespace by path), listen_fds $LISTEN_FDS, hook_log
// $SFORGE_HOOK_LOG (passed on to the hook). 1 fills p; 0 leaves the create
// to the Go shim.
int sforge_front_plan_create(int argc, char **args, const char *spec, size_t len, const struct sforge_front_cfg *c,
                             const char *listen_fds, const char *hook_log, struct sforge_front_plan *p);
// sforge_front_isolated_create runs runc create (argv is the whole
// command line, argv[cmd] "create") and installs p: it exits, or returns
// when the Go shim is to go on (sforge_front_created tells whether runc
// has created the container by then). begin is when the front started.
void sforge_front_isolated_create(const struct sforge_front_cfg *c, char **argv, int cmd, struct sforge_front_plan *p,
                                  const struct timespec *begin);
// Set when runc has created the container and the Go shim must finish the
// isolated create (install, or delete the container and fail).
extern int sforge_front_created;
// Why the front left an isolated create to the Go shim, or NULL.
extern const char *sforge_front_left;
#endif
