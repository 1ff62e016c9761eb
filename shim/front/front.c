// sforge-runtime's front: see doc.go for why this is C.
//
// It runs as an ELF constructor, before the Go runtime starts. For a runc
// command line that cannot start a container (start, delete, kill,
// state...), and for a create or run whose config.json mentions nothing of
// sforge's, it execs the real runtime exactly as the Go shim would (same
// path, argv with that path as argv[0], same environment). For an isolated
// create it reads without doubt, it does the create itself (create.c).
// Whenever anything is not exactly as expected it returns and the Go shim
// handles the invocation: every decision here can only fall back.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cfront.h"
#include "front.h"

// Subcommands that never read a bundle: Args.Modifies() is false for them
// and the shim would exec the runtime at once. create and run read one (see
// sforge_front_bundle); restore, help, spec, checkpoint and anything unknown
// go to the Go shim.
static const char *const passthrough[] = {
	"start", "delete", "kill", "state", "ps", "events", "pause", "resume",
	"list", "exec", "update", "features", NULL,
};

// runc's global flags (shim/args.go): those taking a value, and booleans.
// An unknown flag, or --help/--version, goes to the Go shim.
static const char *const global_value[] = {"log", "log-format", "root", "criu", "rootless", NULL};
static const char *const global_bool[] = {"debug", "systemd-cgroup", NULL};

static const char *const creating[] = {"create", "run", NULL};

// The shim's own log when the settings name none (shim.DefaultLogPath).
#define DEFAULT_LOG "/var/log/sforge/runtime.log"

int sforge_front_command(int argc, char **argv) {
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] != '-')
			return cfront_in(passthrough, a, strlen(a)) || cfront_in(creating, a, strlen(a)) ? i : -1;
		const char *name = a + 1;
		if (*name == '-')
			name++;
		if (*name == '\0' || *name == '-')
			return -1; // "-", "--", "---x": the Go shim decides
		const char *eq = strchr(name, '=');
		size_t n = eq ? (size_t)(eq - name) : strlen(name);
		if (cfront_in(global_value, name, n)) {
			if (!eq && ++i >= argc)
				return -1; // no value: the Go shim reports it
		} else if (!cfront_in(global_bool, name, n) || eq) {
			return -1;
		}
	}
	return -1;
}

// Flags of create and run (shim/args.go createValueFlags, and the booleans
// of runc 1.1). Anything else goes to the Go shim.
static const char *const create_value[] = {"bundle", "b", "console-socket", "pid-file", "preserve-fds", NULL};
static const char *const create_bool[] = {"no-pivot", "no-new-keyring", "detach", "d", "keep", "no-subreaper", NULL};

int sforge_front_create_args(int argc, char **args, struct sforge_front_create_args *c) {
	memset(c, 0, sizeof *c);
	c->bundle = "";
	for (int i = 0; i < argc; i++) {
		const char *a = args[i];
		if (a[0] != '-') {
			if (!c->positional++)
				c->id = a; // ParseArgs: the first positional argument
			continue;
		}
		const char *name = a + 1;
		if (*name == '-')
			name++;
		if (*name == '\0' || *name == '-')
			return 0; // "-", "--", "---x"
		const char *eq = strchr(name, '=');
		size_t n = eq ? (size_t)(eq - name) : strlen(name);
		if (cfront_in(create_bool, name, n) && !eq)
			continue;
		if (!cfront_in(create_value, name, n))
			return 0;
		const char *v = eq ? eq + 1 : (++i < argc ? args[i] : NULL);
		if (!v)
			return 0;
		if ((n == 1 || n == 6) && memcmp(name, n == 1 ? "b" : "bundle", n) == 0) {
			if (!*v)
				return 0;
			c->bundle = v; // the last one wins, as in runc
		} else if (n == 8 && memcmp(name, "pid-file", n) == 0) {
			c->pid_file = v;
		} else if (n == 12 && memcmp(name, "preserve-fds", n) == 0) {
			// The shim rejects what strconv.Atoi does not read as n >= 0.
			size_t k = strspn(v, "0123456789");
			if (k == 0 || k > 9 || v[k])
				return 0;
		}
	}
	return 1;
}

int sforge_front_bundle(int argc, char **args, const char **bundle) {
	struct sforge_front_create_args c;
	int ok = sforge_front_create_args(argc, args, &c);
	*bundle = c.bundle;
	return ok;
}

// What makes the shim parse a spec (RawSpec.MentionsSforge): its
// annotations' prefix, the allowlist variable, or any JSON escape.
static const char *const markers[] = {"sforge.io/", "SFORGE_EGRESS", "\\", NULL};

int sforge_front_mentions(const char *buf, size_t len) {
	for (const char *const *m = markers; *m; m++)
		if (memmem(buf, len, *m, strlen(*m)))
			return 1;
	return 0;
}

// read_string reads "..." into out (size cap, NUL-terminated): printable
// ASCII only.
static int read_string(struct cfront_reader *r, char *out, size_t cap) {
	const char *s;
	size_t n;
	if (!cfront_span(r, &s, &n) || n >= cap)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] > 0x7e)
			return 0;
	memcpy(out, s, n);
	out[n] = '\0';
	return 1;
}

// sforge_front_config is a strict reader of the flat object `sforge
// install` writes. It accepts printable ASCII strings without escapes and
// small integers, each known member with its type, and nothing else; what
// it accepts, encoding/json (with DisallowUnknownFields) reads to the same
// values.
int sforge_front_config(const char *buf, size_t len, struct sforge_front_cfg *c) {
	struct cfront_reader r = {buf, buf + len};
	char key[16], value[sizeof c->runtime];
	memset(c, 0, sizeof *c);
	if (!cfront_take(&r, '{'))
		return 0;
	if (!cfront_take(&r, '}')) {
		do {
			if (!read_string(&r, key, sizeof key) || !cfront_take(&r, ':'))
				return 0;
			if (strcmp(key, "hookTimeout") == 0) {
				if (!cfront_int(&r, &c->hook_timeout))
					return 0;
				continue;
			}
			if (!read_string(&r, value, sizeof value))
				return 0;
			if (strcmp(key, "runtime") == 0) {
				strcpy(c->runtime, value);
			} else if (strcmp(key, "engine") == 0) {
				if (strlen(value) >= sizeof c->engine)
					return 0;
				strcpy(c->engine, value);
			} else if (strcmp(key, "installPriority") == 0) {
				if (strlen(value) >= sizeof c->priority)
					return 0;
				strcpy(c->priority, value);
			} else if (strcmp(key, "log") == 0) {
				strcpy(c->log, value);
			} else if (strcmp(key, "hook") == 0) {
				strcpy(c->hook, value);
			} else {
				return 0;
			}
		} while (cfront_take(&r, ','));
		if (!cfront_take(&r, '}'))
			return 0;
	}
	cfront_ws(&r);
	return r.p == r.end;
}

// read_config reads the settings file into c; 1 when there is none.
static int read_config(struct sforge_front_cfg *c) {
	char buf[4096];
	const char *path = getenv("SFORGE_RUNTIME_CONFIG");
	if (!path || !*path)
		path = "/etc/sforge/runtime.json";
	ssize_t n = cfront_read_small(path, buf, sizeof buf);
	if (n < 0) {
		memset(c, 0, sizeof *c);
		return errno == ENOENT;
	}
	return sforge_front_config(buf, (size_t)n, c);
}

// Where the shim looks for runc when PATH has none (shim.RuncLocations;
// front_test.go checks).
static const char *const usual[] = {"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc",
	"/usr/local/bin/runc", "/sbin/runc", "/bin/runc", NULL};

// find_runc mirrors shim.findRunc: exec.LookPath("runc") (the first
// executable PATH entry), then the usual locations. 0 means the Go shim
// must look (a relative or unclean PATH entry, no eaccess, nothing found).
static int find_runc(char *out, size_t cap) {
	struct stat st;
	const char *path = getenv("PATH");
	// An empty element (leading, trailing or doubled ':') is "." for Go.
	for (; path && *path;) {
		const char *end = strchrnul(path, ':');
		size_t n = (size_t)(end - path);
		if (!cfront_clean_abs(path, n) || n + sizeof "/runc" > cap)
			return 0;
		memcpy(out, path, n);
		strcpy(out + (n == 1 ? 0 : n), "/runc");
		if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
			if (faccessat(AT_FDCWD, out, X_OK, AT_EACCESS) == 0)
				return 1;
			if (errno == ENOSYS || errno == EPERM)
				return 0; // Go checks the mode bits then
		}
		if (!*end)
			break;
		path = end + 1;
		if (!*path)
			return 0;
	}
	for (const char *const *p = usual; *p; p++) {
		if (stat(*p, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111)) {
			strcpy(out, *p);
			return 1;
		}
	}
	return 0;
}

int sforge_front_runtime(struct sforge_front_cfg *c) {
	if (!read_config(c))
		return 0;
	const char *v = getenv("SFORGE_RUNC");
	if (v && *v) {
		if (strlen(v) >= sizeof c->runtime)
			return 0;
		strcpy(c->runtime, v);
	}
	const char *engine = getenv("SFORGE_ENGINE");
	if (!engine || !*engine)
		engine = c->engine;
	if (*engine && !cfront_in(cfront_engines, engine, strlen(engine)))
		return 0;
	if (engine != c->engine)
		strcpy(c->engine, engine); // a known name: it fits
	const char *prio = getenv("SFORGE_INSTALL_PRIORITY");
	if (!prio || !*prio)
		prio = c->priority;
	if (*prio && !cfront_in(cfront_priorities, prio, strlen(prio)))
		return 0; // LoadConfig says what is wrong with it
	if (prio != c->priority)
		strcpy(c->priority, prio); // a known name: it fits
	// LoadConfig: the default log, "-" for none.
	if (!*c->log)
		strcpy(c->log, DEFAULT_LOG);
	else if (strcmp(c->log, "-") == 0)
		c->log[0] = '\0';
	if (!*c->runtime && !find_runc(c->runtime, sizeof c->runtime))
		return 0;
	// The shim refuses a runtime that is itself (an exec loop).
	struct stat rt, self;
	if (stat(c->runtime, &rt) != 0 || stat("/proc/self/exe", &self) != 0)
		return 0;
	return !(rt.st_dev == self.st_dev && rt.st_ino == self.st_ino);
}

int sforge_front_hook(const struct sforge_front_cfg *c, char *out, size_t cap) {
	if (*c->hook) {
		if (strlen(c->hook) >= cap)
			return 0;
		strcpy(out, c->hook);
		return 1;
	}
	// LoadConfig: filepath.Join(filepath.Dir(os.Executable()), HookName).
	// os.Executable reads the same link; a " (deleted)" one is Go's.
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0 || self[0] != '/')
		return 0;
	self[n] = '\0';
	if (strstr(self, " (deleted)") || !cfront_clean_abs(self, (size_t)n))
		return 0;
	size_t dir = (size_t)(strrchr(self, '/') - self) + 1; // keeps the "/" of "/x"
	if (dir + sizeof SFORGE_HOOK_NAME > cap)
		return 0;
	memcpy(out, self, dir);
	strcpy(out + dir, SFORGE_HOOK_NAME);
	return 1;
}

extern char **environ;

void sforge_front_runc_log(char **argv, int cmd, const char **log, const char **format) {
	*log = *format = NULL;
	for (int i = 1; i < cmd; i++) {
		const char *name = argv[i] + 1;
		if (*name == '-')
			name++;
		const char *eq = strchr(name, '=');
		size_t n = eq ? (size_t)(eq - name) : strlen(name);
		if (!cfront_in(global_value, name, n))
			continue;
		const char *v = eq ? eq + 1 : argv[++i];
		if (n == 3 && memcmp(name, "log", 3) == 0)
			*log = v;
		else if (n == 10 && memcmp(name, "log-format", 10) == 0)
			*format = v;
	}
}

__attribute__((constructor)) static void sforge_front(void) {
	static char buf[16384];
	static char *argv[256];
	struct timespec begin;
	clock_gettime(CLOCK_MONOTONIC, &begin);
	if (getenv("SFORGE_RUNTIME_NO_FRONT"))
		return;
	int argc = cfront_cmdline(buf, sizeof buf, argv, sizeof argv / sizeof argv[0]);
	int i = argc < 2 ? -1 : 1 + sforge_front_command(argc - 1, argv + 1);
	if (i <= 0)
		return;
	static struct sforge_front_cfg c;
	if (!cfront_in(creating, argv[i], strlen(argv[i]))) {
		if (!sforge_front_runtime(&c))
			return;
		argv[0] = c.runtime;
		execve(c.runtime, argv, environ);
		return; // the Go shim tries again and reports the error
	}
	// create or run: runc reads config.json in the bundle directory, and
	// so does the shim.
	const char *bundle;
	if (!sforge_front_bundle(argc - i - 1, argv + i + 1, &bundle))
		return;
	size_t len;
	char *spec = cfront_spec(bundle, 64 << 20, &len);
	if (!spec || len == 0 || !sforge_front_runtime(&c)) {
		free(spec);
		return;
	}
	if (!sforge_front_mentions(spec, len)) {
		// Nothing of sforge's: the shim would exec runc without parsing it.
		free(spec);
		argv[0] = c.runtime;
		execve(c.runtime, argv, environ);
		return;
	}
	static struct sforge_front_plan p;
	int mine = strcmp(argv[i], "create") == 0 &&
	           sforge_front_plan_create(argc - i - 1, argv + i + 1, spec, len, &c, getenv("LISTEN_FDS"), getenv("SFORGE_HOOK_LOG"), &p);
	free(spec);
	if (!mine) {
		if (strcmp(argv[i], "create") != 0)
			sforge_front_left = "runc run (the front does creates)";
		return;
	}
	sforge_front_isolated_create(&c, argv, i, &p, &begin);
}

// For front_test.go: the lists compiled in (0 engines, 1 runc locations).
const char *sforge_front_list(int list, int i) {
	const char *const *l = list == 0 ? cfront_engines : list == 2 ? cfront_priorities : usual;
	for (int k = 0; l[k]; k++)
		if (k == i)
			return l[k];
	return NULL;
}
