#ifndef SFORGE_FRONT_H
#define SFORGE_FRONT_H
#include <stddef.h>

// What the front reads from the settings file and the environment.
struct sforge_front_cfg {
	char runtime[4096];
	char engine[16];
};

// sforge_front_command returns the index of the subcommand in args when it
// is one the front execs straight away or create/run, -1 otherwise.
int sforge_front_command(int argc, char **args);
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
// sforge_front_list returns the i-th entry of a list the front holds (0:
// engine names, 1: the usual runc locations), NULL past its end.
const char *sforge_front_list(int list, int i);
#endif
