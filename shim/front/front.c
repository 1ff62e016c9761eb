// sforge-runtime's pass-through front: see doc.go for why this is C.
//
// It runs as an ELF constructor, before the Go runtime starts, and does one
// thing: for a runc command line that cannot start a container (start,
// delete, kill, state...), and for a create or run whose config.json
// mentions nothing of sforge's, it execs the real runtime exactly as the Go
// shim would (same path, argv with that path as argv[0], same environment).
// Whenever anything is not exactly as expected it returns and the Go shim
// handles the invocation: every decision here can only fall back.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

// The engines the shim accepts (engines.Names; front_test.go checks).
static const char *const engines[] = {"auto", "nftables", "iptables", "iptables-nft", "iptables-legacy", NULL};

static int in(const char *const *set, const char *s, size_t n) {
	for (; *set; set++)
		if (strlen(*set) == n && memcmp(*set, s, n) == 0)
			return 1;
	return 0;
}

static const char *const creating[] = {"create", "run", NULL};

int sforge_front_command(int argc, char **argv) {
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] != '-')
			return in(passthrough, a, strlen(a)) || in(creating, a, strlen(a)) ? i : -1;
		const char *name = a + 1;
		if (*name == '-')
			name++;
		if (*name == '\0' || *name == '-')
			return -1; // "-", "--", "---x": the Go shim decides
		const char *eq = strchr(name, '=');
		size_t n = eq ? (size_t)(eq - name) : strlen(name);
		if (in(global_value, name, n)) {
			if (!eq && ++i >= argc)
				return -1; // no value: the Go shim reports it
		} else if (!in(global_bool, name, n) || eq) {
			return -1;
		}
	}
	return -1;
}

// Flags of create and run (shim/args.go createValueFlags, and the booleans
// of runc 1.1). Anything else goes to the Go shim.
static const char *const create_value[] = {"bundle", "b", "console-socket", "pid-file", "preserve-fds", NULL};
static const char *const create_bool[] = {"no-pivot", "no-new-keyring", "detach", "d", "keep", "no-subreaper", NULL};

int sforge_front_bundle(int argc, char **args, const char **bundle) {
	*bundle = "";
	for (int i = 0; i < argc; i++) {
		const char *a = args[i];
		if (a[0] != '-')
			continue; // the container id, or more positional arguments
		const char *name = a + 1;
		if (*name == '-')
			name++;
		if (*name == '\0' || *name == '-')
			return 0; // "-", "--", "---x"
		const char *eq = strchr(name, '=');
		size_t n = eq ? (size_t)(eq - name) : strlen(name);
		if (in(create_bool, name, n) && !eq)
			continue;
		if (!in(create_value, name, n))
			return 0;
		const char *v = eq ? eq + 1 : (++i < argc ? args[i] : NULL);
		if (!v)
			return 0;
		if ((n == 1 || n == 6) && memcmp(name, n == 1 ? "b" : "bundle", n) == 0) {
			if (!*v)
				return 0;
			*bundle = v; // the last one wins, as in runc
		} else if (n == 12 && memcmp(name, "preserve-fds", n) == 0) {
			// The shim rejects what strconv.Atoi does not read as n >= 0.
			size_t k = strspn(v, "0123456789");
			if (k == 0 || k > 9 || v[k])
				return 0;
		}
	}
	return 1;
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

// spec_is_plain reports whether <bundle>/config.json (runc reads it from the
// bundle directory, as does the shim) reads and mentions nothing of
// sforge's: the shim would exec runc without parsing it.
static int spec_is_plain(const char *bundle) {
	char path[4096];
	size_t n = strlen(bundle);
	if (n + sizeof "/config.json" > sizeof path)
		return 0;
	if (n) {
		memcpy(path, bundle, n);
		path[n++] = '/';
	}
	strcpy(path + n, "config.json");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct stat st;
	char *buf = NULL;
	size_t len = 0;
	int plain = 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (64 << 20)) {
		size_t cap = (size_t)st.st_size + 1; // one more: a file that grew is read to its end
		buf = malloc(cap);
		while (buf) {
			ssize_t k = read(fd, buf + len, cap - len);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0) {
				len = 0;
				break;
			}
			if (k == 0) {
				plain = len > 0 && !sforge_front_mentions(buf, len);
				break;
			}
			len += (size_t)k;
			if (len == cap) {
				char *more = realloc(buf, cap *= 2);
				if (!more)
					break;
				buf = more;
			}
		}
	}
	free(buf);
	close(fd);
	return plain;
}

// A strict reader for the flat object `sforge install` writes. It accepts
// printable ASCII strings without escapes and small integers, each known
// member with its type, and nothing else; what it accepts, encoding/json
// (with DisallowUnknownFields) reads to the same values.
struct reader {
	const char *p, *end;
};

static void skip_ws(struct reader *r) {
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

static int take(struct reader *r, char c) {
	skip_ws(r);
	if (r->p < r->end && *r->p == c) {
		r->p++;
		return 1;
	}
	return 0;
}

// read_string reads "..." into out (size cap, NUL-terminated).
static int read_string(struct reader *r, char *out, size_t cap) {
	if (!take(r, '"'))
		return 0;
	size_t n = 0;
	for (; r->p < r->end && *r->p != '"'; r->p++) {
		unsigned char c = (unsigned char)*r->p;
		if (c < 0x20 || c > 0x7e || c == '\\' || n + 1 >= cap)
			return 0;
		out[n++] = (char)c;
	}
	if (r->p >= r->end)
		return 0;
	r->p++;
	out[n] = '\0';
	return 1;
}

// read_int reads -?(0|[1-9][0-9]{0,8}): within int on every platform.
static int read_int(struct reader *r) {
	skip_ws(r);
	if (r->p < r->end && *r->p == '-')
		r->p++;
	if (r->p >= r->end || *r->p < '0' || *r->p > '9')
		return 0;
	if (*r->p == '0') {
		r->p++;
	} else {
		int digits = 0;
		while (r->p < r->end && *r->p >= '0' && *r->p <= '9' && digits < 10) {
			r->p++;
			digits++;
		}
		if (digits > 9)
			return 0;
	}
	// A number must end here: "1.5", "1e3", "01" are not ours.
	return !(r->p < r->end && (*r->p == '.' || *r->p == 'e' || *r->p == 'E' || (*r->p >= '0' && *r->p <= '9')));
}

int sforge_front_config(const char *buf, size_t len, struct sforge_front_cfg *c) {
	struct reader r = {buf, buf + len};
	char key[16], value[sizeof c->runtime];
	memset(c, 0, sizeof *c);
	if (!take(&r, '{'))
		return 0;
	if (!take(&r, '}')) {
		do {
			if (!read_string(&r, key, sizeof key) || !take(&r, ':'))
				return 0;
			if (strcmp(key, "hookTimeout") == 0) {
				if (!read_int(&r))
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
			} else if (strcmp(key, "hook") != 0 && strcmp(key, "log") != 0) {
				return 0;
			}
		} while (take(&r, ','));
		if (!take(&r, '}'))
			return 0;
	}
	skip_ws(&r);
	return r.p == r.end;
}

// read_small reads the whole file at path into buf. It returns the length,
// or -1 with errno set (EFBIG: it does not fit in cap bytes).
static ssize_t read_small(const char *path, char *buf, size_t cap) {
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = 0;
	for (;;) {
		ssize_t k = read(fd, buf + n, cap - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			close(fd);
			return -1;
		}
		if (k == 0)
			break;
		n += (size_t)k;
		if (n == cap) {
			close(fd);
			errno = EFBIG;
			return -1;
		}
	}
	close(fd);
	return (ssize_t)n;
}

// read_config reads the settings file into c; 1 when there is none.
static int read_config(struct sforge_front_cfg *c) {
	char buf[4096];
	const char *path = getenv("SFORGE_RUNTIME_CONFIG");
	if (!path || !*path)
		path = "/etc/sforge/runtime.json";
	ssize_t n = read_small(path, buf, sizeof buf);
	if (n < 0) {
		memset(c, 0, sizeof *c);
		return errno == ENOENT;
	}
	return sforge_front_config(buf, (size_t)n, c);
}

// clean_abs reports whether the n bytes at d are an absolute path that
// filepath.Join leaves as it is (no empty, "." or ".." element, no trailing
// slash but for "/"): the runtime path, which is also argv[0], must be the
// string the Go shim would build.
static int clean_abs(const char *d, size_t n) {
	if (n == 0 || d[0] != '/')
		return 0;
	if (n == 1)
		return 1;
	for (size_t i = 0; i < n;) {
		size_t j = i + 1; // d[i] is '/'
		while (j < n && d[j] != '/')
			j++;
		size_t len = j - i - 1;
		if (len == 0 || (len == 1 && d[i + 1] == '.') || (len == 2 && d[i + 1] == '.' && d[i + 2] == '.'))
			return 0;
		i = j;
	}
	return 1;
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
		if (!clean_abs(path, n) || n + sizeof "/runc" > cap)
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
	if (*engine && !in(engines, engine, strlen(engine)))
		return 0;
	if (!*c->runtime && !find_runc(c->runtime, sizeof c->runtime))
		return 0;
	// The shim refuses a runtime that is itself (an exec loop).
	struct stat rt, self;
	if (stat(c->runtime, &rt) != 0 || stat("/proc/self/exe", &self) != 0)
		return 0;
	return !(rt.st_dev == self.st_dev && rt.st_ino == self.st_ino);
}

// read_cmdline splits /proc/self/cmdline into argv (constructors get no
// arguments from musl, the libc sforge-runtime links). 0 when it cannot.
static int read_cmdline(char *buf, size_t cap, char **argv, int max) {
	ssize_t len = read_small("/proc/self/cmdline", buf, cap);
	if (len <= 0)
		return 0;
	size_t n = (size_t)len;
	if (buf[n - 1] != '\0')
		return 0;
	int argc = 0;
	for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
		if (argc + 1 >= max)
			return 0;
		argv[argc++] = buf + i;
	}
	argv[argc] = NULL;
	return argc;
}

extern char **environ;

__attribute__((constructor)) static void sforge_front(void) {
	static char buf[16384];
	static char *argv[256];
	if (getenv("SFORGE_RUNTIME_NO_FRONT"))
		return;
	int argc = read_cmdline(buf, sizeof buf, argv, sizeof argv / sizeof argv[0]);
	int i = argc < 2 ? -1 : 1 + sforge_front_command(argc - 1, argv + 1);
	if (i <= 0)
		return;
	if (in(creating, argv[i], strlen(argv[i]))) {
		const char *bundle;
		if (!sforge_front_bundle(argc - i - 1, argv + i + 1, &bundle) || !spec_is_plain(bundle))
			return;
	}
	static struct sforge_front_cfg c;
	if (!sforge_front_runtime(&c))
		return;
	argv[0] = c.runtime;
	execve(c.runtime, argv, environ);
	// The Go shim tries again and reports the error.
}

// For front_test.go: the lists compiled in (0 engines, 1 runc locations).
const char *sforge_front_list(int list, int i) {
	const char *const *l = list == 0 ? engines : usual;
	for (int k = 0; l[k]; k++)
		if (k == i)
			return l[k];
	return NULL;
}
