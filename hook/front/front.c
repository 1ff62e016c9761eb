// sforge-hook's front: see doc.go for why this is C.
//
// It runs as an ELF constructor, before the Go runtime starts, for two
// cases. `sforge-hook poststop` for a container whose network namespace was
// its own (no path: it died with the container, and the rules with it) or
// whose namespace path is gone: the Go hook returns there without doing or
// logging anything (hook.poststop); the front exits 0 instead of starting
// it. Whenever anything is not exactly as expected it leaves the decision
// to the Go hook, with the state it read from stdin put back where the Go
// hook reads it: every decision here can only fall back. And the hook's
// internal `hold-netlink` mode (hook.hold), which only waits.
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cfront.h"
#include "front.h"

// The bounds of hook/state.go (maxStateBytes, maxSpecBytes), and a nesting
// depth past which the front leaves a document to Go.
#define MAX_STATE (1 << 20)
#define MAX_SPEC (16 << 20)
#define MAX_DEPTH 64

int sforge_hook_front_args(int argc, char **args) {
	const char *env = getenv("SFORGE_ENGINE");
	if (env && *env && !cfront_in(cfront_engines, env, strlen(env)))
		return 0;
	if (argc < 1 || strcmp(args[0], "poststop") != 0)
		return 0;
	for (int i = 1; i < argc; i++) {
		const char *a = args[i], *eq = strchr(a, '=');
		size_t n = eq ? (size_t)(eq - a) : strlen(a);
		int engine = n == 8 && memcmp(a, "--engine", 8) == 0;
		if (!engine && !(n == 5 && memcmp(a, "--log", 5) == 0))
			return 0;
		const char *v = eq ? eq + 1 : (++i < argc ? args[i] : NULL);
		if (!v || !*v || (engine && !cfront_in(cfront_engines, v, strlen(v))))
			return 0;
	}
	return 1;
}

// A validating JSON reader (RFC 8259) that reads only what the Go hook's
// lean decoding reads (hook/state.go) and checks those members' types as
// encoding/json would; everything else it only checks for syntax.
struct json {
	struct cfront_reader r;
	int depth;
};

typedef int (*member_fn)(struct json *j, void *ctx, const char *key, size_t n);
typedef int (*element_fn)(struct json *j, void *ctx);

static int value(struct json *j);

static int word(struct json *j, const char *w) {
	size_t n = strlen(w);
	cfront_ws(&j->r);
	if ((size_t)(j->r.end - j->r.p) < n || memcmp(j->r.p, w, n) != 0)
		return 0;
	j->r.p += n;
	return 1;
}

// null takes a null if one comes next: encoding/json leaves a Go value as
// it is for null, whatever its type.
static int null(struct json *j) { return word(j, "null"); }

static int digits(struct cfront_reader *r) {
	const char *b = r->p;
	while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
		r->p++;
	return r->p > b;
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
static int number(struct cfront_reader *r) {
	if (r->p < r->end && *r->p == '-')
		r->p++;
	if (r->p < r->end && *r->p == '0')
		r->p++;
	else if (!digits(r))
		return 0;
	if (r->p < r->end && *r->p == '.' && (r->p++, !digits(r)))
		return 0;
	if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
		r->p++;
		if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
			r->p++;
		if (!digits(r))
			return 0;
	}
	return 1;
}

static int object(struct json *j, member_fn one, void *ctx) {
	if (!cfront_take(&j->r, '{') || ++j->depth > MAX_DEPTH)
		return 0;
	if (!cfront_take(&j->r, '}')) {
		do {
			const char *key;
			size_t n;
			if (!cfront_span(&j->r, &key, &n) || !cfront_take(&j->r, ':') || !one(j, ctx, key, n))
				return 0;
		} while (cfront_take(&j->r, ','));
		if (!cfront_take(&j->r, '}'))
			return 0;
	}
	j->depth--;
	return 1;
}

static int array(struct json *j, element_fn one, void *ctx) {
	if (!cfront_take(&j->r, '[') || ++j->depth > MAX_DEPTH)
		return 0;
	if (!cfront_take(&j->r, ']')) {
		do {
			if (!one(j, ctx))
				return 0;
		} while (cfront_take(&j->r, ','));
		if (!cfront_take(&j->r, ']'))
			return 0;
	}
	j->depth--;
	return 1;
}

static int any_member(struct json *j, void *ctx, const char *key, size_t n) {
	(void)ctx, (void)key, (void)n;
	return value(j);
}

static int any_element(struct json *j, void *ctx) {
	(void)ctx;
	return value(j);
}

// text reads a string or null (*s NULL then).
static int text(struct json *j, const char **s, size_t *n) {
	*s = NULL;
	*n = 0;
	return null(j) || cfront_span(&j->r, s, n);
}

static int text_element(struct json *j, void *ctx) {
	const char *s;
	size_t n;
	(void)ctx;
	return text(j, &s, &n);
}

static int text_member(struct json *j, void *ctx, const char *key, size_t n) {
	(void)key, (void)n;
	return text_element(j, ctx);
}

// texts reads what encoding/json decodes into a []string.
static int texts(struct json *j) { return null(j) || array(j, text_element, NULL); }

static int value(struct json *j) {
	cfront_ws(&j->r);
	if (j->r.p >= j->r.end)
		return 0;
	switch (*j->r.p) {
	case '{':
		return object(j, any_member, NULL);
	case '[':
		return array(j, any_element, NULL);
	case '"':
		return text_element(j, NULL);
	case 't':
		return word(j, "true");
	case 'f':
		return word(j, "false");
	case 'n':
		return null(j);
	}
	return number(&j->r);
}

static int ascii(const char *s, size_t n) {
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

// field finds the member named key among a struct's JSON names: its index,
// -1 for a member the Go struct does not have, -2 for one the front leaves
// to Go: a name that matches without being equal (encoding/json matches
// names without regard to case, Unicode folding included), or a second
// member of that name (the last one wins in Go).
static int field(const char *const *names, unsigned *seen, const char *key, size_t n) {
	if (!ascii(key, n))
		return -2;
	for (int f = 0; names[f]; f++) {
		if (strlen(names[f]) != n || strncasecmp(names[f], key, n) != 0)
			continue;
		if (memcmp(names[f], key, n) != 0 || (*seen & (1u << f)))
			return -2;
		*seen |= 1u << f;
		return f;
	}
	return -1;
}

// The OCI state: the members of ReadState's lean struct.
static const char *const state_names[] = {"ociVersion", "id", "status", "pid", "bundle", NULL};

struct state {
	unsigned seen;
	const char *bundle;
	size_t bundle_n, id_n;
};

static int state_member(struct json *j, void *ctx, const char *key, size_t n) {
	struct state *st = ctx;
	int f = field(state_names, &st->seen, key, n);
	if (f < 0)
		return f == -1 && value(j);
	if (f == 3) {
		long pid; // ReadState refuses a negative one
		return cfront_int(&j->r, &pid) && pid >= 0;
	}
	const char *s;
	size_t sn;
	if (!cfront_span(&j->r, &s, &sn))
		return 0; // null or a number: Go's to say
	if (f == 1)
		st->id_n = sn;
	else if (f == 4)
		st->bundle = s, st->bundle_n = sn;
	return 1;
}

int sforge_hook_front_state(const char *buf, size_t len, char *bundle, size_t cap) {
	struct json j = {{buf, buf + len}, 0};
	struct state st = {0};
	if (len > MAX_STATE || !object(&j, state_member, &st))
		return 0;
	cfront_ws(&j.r);
	// ReadState's checks, and a bundle that filepath.Join leaves as it is
	// and that holds what Go would read (it replaces invalid UTF-8).
	if (j.r.p != j.r.end || st.id_n == 0 || !st.bundle || st.bundle_n >= cap ||
	    !ascii(st.bundle, st.bundle_n) || !cfront_clean_abs(st.bundle, st.bundle_n))
		return 0;
	memcpy(bundle, st.bundle, st.bundle_n);
	bundle[st.bundle_n] = '\0';
	return 1;
}

// config.json: the members of hook.leanSpec, level by level.
static const char *const spec_names[] = {"ociVersion", "annotations", "process", "linux", NULL};
static const char *const process_names[] = {"env", "capabilities", NULL};
static const char *const caps_names[] = {"bounding", "effective", "inheritable", "permitted", "ambient", NULL};
static const char *const linux_names[] = {"namespaces", NULL};
static const char *const ns_names[] = {"type", "path", NULL};

struct spec {
	int net; // a network namespace was found: the first one counts
	const char *path;
	size_t path_n;
};

// level is an object being read: the names seen in it, and the spec.
struct level {
	unsigned seen;
	struct spec *spec;
};

static int caps_member(struct json *j, void *ctx, const char *key, size_t n) {
	int f = field(caps_names, &((struct level *)ctx)->seen, key, n);
	return f == -1 ? value(j) : f >= 0 && texts(j);
}

static int process_member(struct json *j, void *ctx, const char *key, size_t n) {
	struct level *l = ctx, caps = {0, l->spec};
	int f = field(process_names, &l->seen, key, n);
	if (f < 0)
		return f == -1 && value(j);
	return f == 0 ? texts(j) : null(j) || object(j, caps_member, &caps);
}

struct ns {
	unsigned seen;
	const char *type, *path;
	size_t type_n, path_n;
};

static int ns_member(struct json *j, void *ctx, const char *key, size_t n) {
	struct ns *e = ctx;
	int f = field(ns_names, &e->seen, key, n);
	if (f < 0)
		return f == -1 && value(j);
	return f == 0 ? text(j, &e->type, &e->type_n) : text(j, &e->path, &e->path_n);
}

static int ns_element(struct json *j, void *ctx) {
	struct spec *sp = ctx;
	struct ns e = {0};
	if (null(j))
		return 1; // a zero LinuxNamespace
	if (!object(j, ns_member, &e))
		return 0;
	if (!sp->net && e.type_n == 7 && memcmp(e.type, "network", 7) == 0) {
		sp->net = 1;
		sp->path = e.path;
		sp->path_n = e.path_n;
	}
	return 1;
}

static int linux_member(struct json *j, void *ctx, const char *key, size_t n) {
	struct level *l = ctx;
	int f = field(linux_names, &l->seen, key, n);
	if (f < 0)
		return f == -1 && value(j);
	return null(j) || array(j, ns_element, l->spec);
}

static int spec_member(struct json *j, void *ctx, const char *key, size_t n) {
	struct level *l = ctx, inner = {0, l->spec};
	const char *s;
	size_t sn;
	switch (field(spec_names, &l->seen, key, n)) {
	case -1:
		return value(j);
	case 0:
		return text(j, &s, &sn);
	case 1:
		return null(j) || object(j, text_member, NULL); // map[string]string
	case 2:
		return null(j) || object(j, process_member, &inner);
	case 3:
		return null(j) || object(j, linux_member, &inner);
	}
	return 0;
}

int sforge_hook_front_spec(const char *buf, size_t len, int *net, char *path, size_t cap) {
	struct json j = {{buf, buf + len}, 0};
	struct spec sp = {0};
	struct level top = {0, &sp};
	*net = 0;
	path[0] = '\0';
	if (len > MAX_SPEC || !object(&j, spec_member, &top))
		return 0;
	cfront_ws(&j.r);
	if (j.r.p != j.r.end || sp.path_n >= cap || !ascii(sp.path, sp.path_n))
		return 0;
	*net = sp.net;
	if (sp.path_n)
		memcpy(path, sp.path, sp.path_n);
	path[sp.path_n] = '\0';
	return 1;
}

int sforge_hook_front_idle(const char *buf, size_t len) {
	char bundle[4096], path[4096];
	if (!sforge_hook_front_state(buf, len, bundle, sizeof bundle))
		return 0;
	size_t n;
	char *spec = cfront_spec(bundle, MAX_SPEC, &n);
	int net, ok = spec && sforge_hook_front_spec(spec, n, &net, path, sizeof path);
	free(spec);
	if (!ok)
		return 0;
	// hook.poststop: no network namespace, none with a path, or its path
	// gone (os.IsNotExist: ENOENT alone).
	struct stat st;
	return !net || !*path || (stat(path, &st) != 0 && errno == ENOENT);
}

// put_back makes what was read from stdin readable again at fd 0, from a
// memory file. Should that fail, the Go hook reads what is left of stdin: a
// truncated state, which it logs and returns on (poststop never fails a
// container's deletion).
static void put_back(int keep, const char *buf, size_t n) {
	size_t off = 0;
	while (off < n) {
		ssize_t k = write(keep, buf + off, n - off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return;
		off += (size_t)k;
	}
	if (lseek(keep, 0, SEEK_SET) == 0)
		dup2(keep, 0);
}

// hold is hook.hold, for the copy of the hook that a poststop's removal
// hands its netlink socket to (descriptor 3, inherited): it ends when stdin
// ends (the hook exited) or fails, or after 10 s (hook.holdTimeout), and
// its exit closes the socket. In C the holder costs no Go start beside
// runc's delete.
static void hold(void) {
	struct timespec now, end;
	char buf[512];
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += 10;
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		long ms = (end.tv_sec - now.tv_sec) * 1000 + (end.tv_nsec - now.tv_nsec) / 1000000;
		struct pollfd p = {.fd = 0, .events = POLLIN};
		int r = ms > 0 ? poll(&p, 1, (int)ms) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			_exit(0);
		ssize_t k = read(0, buf, sizeof buf);
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (k <= 0)
			_exit(0);
	}
}

__attribute__((constructor)) static void sforge_hook_front(void) {
	static char cmd[16384];
	static char *argv[64];
	if (getenv("SFORGE_HOOK_NO_FRONT"))
		return;
	int argc = cfront_cmdline(cmd, sizeof cmd, argv, sizeof argv / sizeof argv[0]);
	if (argc == 2 && strcmp(argv[1], "hold-netlink") == 0) // hook.Main's test
		hold();
	if (argc < 2 || !sforge_hook_front_args(argc - 1, argv + 1))
		return;
	// The memory file first: without it, the state cannot be put back,
	// and stdin must stay as it is for the Go hook.
	int keep = memfd_create("sforge-hook-state", MFD_CLOEXEC);
	if (keep < 0)
		return;
	char *buf = malloc(MAX_STATE + 1);
	if (buf) {
		// At most ReadState's limit and one more: a larger state is the
		// Go hook's to refuse.
		int err;
		size_t n = cfront_read_fd(0, buf, MAX_STATE + 1, &err);
		if (!err && sforge_hook_front_idle(buf, n))
			_exit(0);
		if (n > 0) // nothing read: the Go hook reads the same end or error
			put_back(keep, buf, n);
		free(buf);
	}
	close(keep);
}
