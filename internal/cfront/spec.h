// The OCI documents the fronts read (the state on a hook's stdin, a
// bundle's config.json), read in C as the Go code reads them. Everything
// here is static, like the rest of cfront.
#ifndef SFORGE_CFRONT_SPEC_H
#define SFORGE_CFRONT_SPEC_H
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "cfront.h"

// A nesting depth past which the fronts leave a document to Go.
#define CFRONT_MAX_DEPTH 64
// The largest config.json the fronts read (hook/state.go's maxSpecBytes);
// a larger one is left to Go.
#define CFRONT_MAX_SPEC (16 << 20)

// A validating JSON reader (RFC 8259) for the members the fronts read: it
// checks their types as encoding/json would and everything else only for
// syntax. A reader calls cfront_object/cfront_array with a function per
// member or element.
struct cfront_json {
	struct cfront_reader r;
	int depth;
};

typedef int (*cfront_member_fn)(struct cfront_json *j, void *ctx, const char *key, size_t n);
typedef int (*cfront_element_fn)(struct cfront_json *j, void *ctx);

static inline int cfront_value(struct cfront_json *j);

static inline int cfront_word(struct cfront_json *j, const char *w) {
	size_t n = strlen(w);
	cfront_ws(&j->r);
	if ((size_t)(j->r.end - j->r.p) < n || memcmp(j->r.p, w, n) != 0)
		return 0;
	j->r.p += n;
	return 1;
}

// cfront_null takes a null if one comes next: encoding/json leaves a Go value as
// it is for null, whatever its type.
static inline int cfront_null(struct cfront_json *j) { return cfront_word(j, "null"); }

static inline int cfront_digits(struct cfront_reader *r) {
	const char *b = r->p;
	while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
		r->p++;
	return r->p > b;
}

// cfront_number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
static inline int cfront_number(struct cfront_reader *r) {
	if (r->p < r->end && *r->p == '-')
		r->p++;
	if (r->p < r->end && *r->p == '0')
		r->p++;
	else if (!cfront_digits(r))
		return 0;
	if (r->p < r->end && *r->p == '.' && (r->p++, !cfront_digits(r)))
		return 0;
	if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
		r->p++;
		if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
			r->p++;
		if (!cfront_digits(r))
			return 0;
	}
	return 1;
}

// cfront_object reads an object, calling one for each member. A name that
// holds an escape reaches one as NULL (n 0): it is not its bytes, and
// only a member that is skipped may have one (cfront_field says "not
// sure" for NULL).
static inline int cfront_object(struct cfront_json *j, cfront_member_fn one, void *ctx) {
	if (!cfront_take(&j->r, '{') || ++j->depth > CFRONT_MAX_DEPTH)
		return 0;
	if (!cfront_take(&j->r, '}')) {
		do {
			const char *key;
			size_t n;
			if (!cfront_escaped(&j->r, &key, &n) || !cfront_take(&j->r, ':') || !one(j, ctx, key, n))
				return 0;
		} while (cfront_take(&j->r, ','));
		if (!cfront_take(&j->r, '}'))
			return 0;
	}
	j->depth--;
	return 1;
}

static inline int cfront_array(struct cfront_json *j, cfront_element_fn one, void *ctx) {
	if (!cfront_take(&j->r, '[') || ++j->depth > CFRONT_MAX_DEPTH)
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

static inline int cfront_any_member(struct cfront_json *j, void *ctx, const char *key, size_t n) {
	(void)ctx, (void)key, (void)n;
	return cfront_value(j);
}

static inline int cfront_any_element(struct cfront_json *j, void *ctx) {
	(void)ctx;
	return cfront_value(j);
}

// cfront_text reads a string or null (*s NULL then).
static inline int cfront_text(struct cfront_json *j, const char **s, size_t *n) {
	*s = NULL;
	*n = 0;
	return cfront_null(j) || cfront_span(&j->r, s, n);
}

// cfront_skip_string skips a string whose value nothing reads (a
// process's arguments, say: `sh -c 'a && b'` reaches config.json as
// "a \u0026\u0026 b" from encoding/json).
static inline int cfront_skip_string(struct cfront_json *j) {
	const char *s;
	size_t n;
	return cfront_escaped(&j->r, &s, &n);
}

static inline int cfront_value(struct cfront_json *j) {
	cfront_ws(&j->r);
	if (j->r.p >= j->r.end)
		return 0;
	switch (*j->r.p) {
	case '{':
		return cfront_object(j, cfront_any_member, NULL);
	case '[':
		return cfront_array(j, cfront_any_element, NULL);
	case '"':
		return cfront_skip_string(j);
	case 't':
		return cfront_word(j, "true");
	case 'f':
		return cfront_word(j, "false");
	case 'n':
		return cfront_null(j);
	}
	return cfront_number(&j->r);
}

static inline int cfront_ascii(const char *s, size_t n) {
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] > 0x7e)
			return 0;
	return 1;
}

// cfront_field finds the member named key among a struct's JSON names: its index,
// -1 for a member the Go struct does not have, -2 for one the front leaves
// to Go: a name that matches without being equal (encoding/json matches
// names without regard to case, Unicode folding included), or a second
// member of that name (the last one wins in Go).
static inline int cfront_field(const char *const *names, unsigned *seen, const char *key, size_t n) {
	if (!key || !cfront_ascii(key, n))
		return -2; // an escaped name, or not ASCII
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

// config.json: the members of hook.leanSpec, level by level. The shim reads
// the same members as generic JSON (shim.ParseSpec: maps, so names match
// exactly); what this reader takes, both read to the same values, and a
// name it would fold (cfront_field's -2) leaves the document to Go.
static const char *const cfront_spec_names[] = {"ociVersion", "annotations", "process", "linux", "hooks", NULL};
static const char *const cfront_process_names[] = {"env", "capabilities", NULL};
static const char *const cfront_caps_names[] = {"bounding", "effective", "inheritable", "permitted", "ambient", NULL};
static const char *const cfront_linux_names[] = {"namespaces", NULL};
static const char *const cfront_ns_names[] = {"type", "path", NULL};

// The most capabilities of one list whose places the reader keeps (there
// are 41 capabilities); a longer list is left to Go by the shim's front.
#define CFRONT_MAX_CAPS 64

struct cfront_oci;

// A capability list as it is in the document: the array's bytes from '['
// to past ']', and its elements' (a string or null).
struct cfront_caps_list {
	struct cfront_oci *spec;
	const char *at, *end; // NULL when the list is absent or null
	size_t n;             // elements, counted past CFRONT_MAX_CAPS too
	int raw;              // one of them is CAP_NET_RAW
	struct {
		const char *at, *end;
		int raw;
	} elem[CFRONT_MAX_CAPS];
};

struct cfront_oci {
	int net; // a network namespace was found: the first one counts
	const char *path;
	size_t path_n;
	// The allowlist, as policy.Lookup finds it: the annotation, else the
	// environment form. unsure: a case the front leaves to Go (a repeated
	// or null annotation, the environment form set twice differently, a
	// value that is not ASCII).
	int ann, env, unsure;
	// other: an annotation of sforge's besides the allowlist (the shim's
	// own, shim.preisolatedAnnotation: the Go shim reads and removes it).
	int other;
	const char *ann_v, *env_v;
	size_t ann_n, env_n;
	// checkCaps: a process, with a capabilities object; a capability the
	// Go code refuses (NET_ADMIN, SYS_ADMIN, anything not ASCII) and
	// CAP_NET_RAW (the hook refuses it too, the shim drops it).
	int process, caps, admin_cap, net_raw;
	// The capability lists, by cfront_caps_names' order, where they are in
	// the document: the shim's front drops CAP_NET_RAW from them as
	// DropCapability does.
	struct cfront_caps_list cap_lists[5];
	// Where the shim's front adds its poststop hook (Spec.AddHook) for a
	// namespace given by path: top is the document's '{'; hooks_at and
	// hooks_end the hooks member's value (NULL when there is none),
	// hooks_n its members; poststop_at and poststop_end a null poststop.
	// hooks_odd: a hooks value that is neither null nor an object, a
	// poststop that is not null, or a member of hooks that may be one
	// (escaped, or a name that folds to it): the front leaves those to Go.
	const char *top, *hooks_at, *hooks_end, *poststop_at, *poststop_end;
	size_t hooks_n;
	int hooks_odd;
};

// level is an object being read: the names seen in it, and the spec.
struct cfront_level {
	unsigned seen;
	struct cfront_oci *spec;
};

// What a capability is to the Go code's tests (canonicalCap, then
// checkCaps' forbiddenCaps or the shim's refuseCapabilities and
// dropCapability).
enum { CFRONT_CAP_OTHER, CFRONT_CAP_NET_RAW, CFRONT_CAP_ADMIN };

// cfront_cap_kind reads one capability as canonicalCap does: any non-ASCII
// byte counts as CFRONT_CAP_ADMIN (forbidden, refused), since
// strings.ToUpper and TrimSpace read Unicode (ToUpper("ı") is "I").
static inline int cfront_cap_kind(const char *s, size_t n) {
	char up[64];
	if (!cfront_ascii(s, n))
		return CFRONT_CAP_ADMIN;
	while (n && strchr(" \t\n\v\f\r", *s))
		s++, n--;
	while (n && strchr(" \t\n\v\f\r", s[n - 1]))
		n--;
	if (n >= sizeof up)
		return CFRONT_CAP_OTHER; // longer than any capability: not one of ours
	for (size_t i = 0; i < n; i++)
		up[i] = s[i] >= 'a' && s[i] <= 'z' ? s[i] - 'a' + 'A' : s[i];
	const char *c = up;
	if (n >= 4 && memcmp(up, "CAP_", 4) == 0)
		c += 4, n -= 4;
	if (n == 7 && memcmp(c, "NET_RAW", 7) == 0)
		return CFRONT_CAP_NET_RAW;
	if (n == 9 && (memcmp(c, "NET_ADMIN", 9) == 0 || memcmp(c, "SYS_ADMIN", 9) == 0))
		return CFRONT_CAP_ADMIN;
	return CFRONT_CAP_OTHER;
}

static inline int cfront_cap_element(struct cfront_json *j, void *ctx) {
	struct cfront_caps_list *l = ctx;
	struct cfront_oci *sp = l->spec;
	const char *s;
	size_t n;
	cfront_ws(&j->r);
	const char *at = j->r.p;
	if (!cfront_text(j, &s, &n))
		return 0;
	int kind = s ? cfront_cap_kind(s, n) : CFRONT_CAP_OTHER; // null is "" in a []string
	sp->admin_cap |= kind == CFRONT_CAP_ADMIN;
	sp->net_raw |= kind == CFRONT_CAP_NET_RAW;
	l->raw |= kind == CFRONT_CAP_NET_RAW;
	if (l->n < CFRONT_MAX_CAPS) {
		l->elem[l->n].at = at;
		l->elem[l->n].end = j->r.p;
		l->elem[l->n].raw = kind == CFRONT_CAP_NET_RAW;
	}
	l->n++;
	return 1;
}

static inline int cfront_caps_member(struct cfront_json *j, void *ctx, const char *key, size_t n) {
	struct cfront_level *l = ctx;
	int f = cfront_field(cfront_caps_names, &l->seen, key, n);
	if (f < 0)
		return f == -1 && cfront_value(j);
	if (cfront_null(j))
		return 1;
	struct cfront_caps_list *list = &l->spec->cap_lists[f];
	*list = (struct cfront_caps_list){.spec = l->spec};
	cfront_ws(&j->r);
	list->at = j->r.p;
	if (!cfront_array(j, cfront_cap_element, list))
		return 0;
	list->end = j->r.p;
	return 1;
}

// The environment form of the allowlist: policy.EnvVar and "=".
#define EGRESS_ENV "SFORGE_EGRESS="

static inline int cfront_env_element(struct cfront_json *j, void *ctx) {
	struct cfront_oci *sp = ctx;
	const char *s;
	size_t n, k = sizeof EGRESS_ENV - 1;
	if (cfront_null(j))
		return 1; // "" to Go: not ours
	cfront_ws(&j->r);
	const char *raw = j->r.p + 1; // the string's first byte
	if (!cfront_escaped(&j->r, &s, &n))
		return 0;
	if (!s) {
		// An entry with an escape (a task's prompt with its newlines, a
		// URL's "&" as encoding/json writes it: "\u0026"). What comes
		// before its first backslash is what it decodes to first. Only
		// if that starts with "SFORGE_EGRESS=", or is the beginning of it
		// (an escape may spell the rest), can it be the allowlist's:
		// Go's, then. Any other entry is not ours, whatever it holds.
		size_t pre = (size_t)((const char *)memchr(raw, '\\', (size_t)(j->r.p - raw)) - raw);
		if (memcmp(raw, EGRESS_ENV, pre < k ? pre : k) == 0)
			sp->unsure = 1;
		return 1;
	}
	if (n < k || memcmp(s, EGRESS_ENV, k) != 0)
		return 1;
	s += k, n -= k;
	if (!cfront_ascii(s, n) || (sp->env && (n != sp->env_n || memcmp(s, sp->env_v, n) != 0)))
		sp->unsure = 1; // not ASCII, or Lookup's "set more than once"
	sp->env = 1, sp->env_v = s, sp->env_n = n;
	return 1;
}

static inline int cfront_process_member(struct cfront_json *j, void *ctx, const char *key, size_t n) {
	struct cfront_level *l = ctx, caps = {0, l->spec};
	int f = cfront_field(cfront_process_names, &l->seen, key, n);
	if (f < 0)
		return f == -1 && cfront_value(j);
	if (f == 0)
		return cfront_null(j) || cfront_array(j, cfront_env_element, l->spec);
	if (cfront_null(j))
		return 1;
	l->spec->caps = 1;
	return cfront_object(j, cfront_caps_member, &caps);
}

// The annotation that carries the allowlist (policy.AnnotationKey), and
// the prefix of all of sforge's (shim.sforgeAnnotationPrefix).
#define EGRESS_ANNOTATION "sforge.io/egress"
#define SFORGE_PREFIX "sforge.io/"

static inline int cfront_annotation_member(struct cfront_json *j, void *ctx, const char *key, size_t n) {
	struct cfront_oci *sp = ctx;
	const char *s = NULL;
	size_t sn = 0;
	// A value with escapes is read for its syntax only (s NULL): it
	// matters only when it is sforge's.
	if (!cfront_null(j) && !cfront_escaped(&j->r, &s, &sn))
		return 0;
	if (!key) {
		sp->unsure = 1; // an escaped name may spell sforge's
		return 1;
	}
	if (n != sizeof EGRESS_ANNOTATION - 1 || memcmp(key, EGRESS_ANNOTATION, n) != 0) {
		if (n >= sizeof SFORGE_PREFIX - 1 && memcmp(key, SFORGE_PREFIX, sizeof SFORGE_PREFIX - 1) == 0)
			sp->other = 1;
		return 1;
	}
	if (sp->ann || !s || !cfront_ascii(s, sn))
		sp->unsure = 1; // the last one wins in Go; null is ""; escaped
	sp->ann = 1, sp->ann_v = s, sp->ann_n = sn;
	return 1;
}

struct cfront_ns {
	unsigned seen;
	const char *type, *path;
	size_t type_n, path_n;
};

static inline int cfront_ns_member(struct cfront_json *j, void *ctx, const char *key, size_t n) {
	struct cfront_ns *e = ctx;
	int f = cfront_field(cfront_ns_names, &e->seen, key, n);
	if (f < 0)
		return f == -1 && cfront_value(j);
	return f == 0 ? cfront_text(j, &e->type, &e->type_n) : cfront_text(j, &e->path, &e->path_n);
}

static inline int cfront_ns_element(struct cfront_json *j, void *ctx) {
	struct cfront_oci *sp = ctx;
	struct cfront_ns e = {0};
	if (cfront_null(j))
		return 1; // a zero LinuxNamespace
	if (!cfront_object(j, cfront_ns_member, &e))
		return 0;
	if (!sp->net && e.type_n == 7 && memcmp(e.type, "network", 7) == 0) {
		sp->net = 1;
		sp->path = e.path;
		sp->path_n = e.path_n;
	}
	return 1;
}

static inline int cfront_linux_member(struct cfront_json *j, void *ctx, const char *key, size_t n) {
	struct cfront_level *l = ctx;
	int f = cfront_field(cfront_linux_names, &l->seen, key, n);
	if (f < 0)
		return f == -1 && cfront_value(j);
	return cfront_null(j) || cfront_array(j, cfront_ns_element, l->spec);
}

#define CFRONT_POSTSTOP "poststop"

static inline int cfront_hooks_member(struct cfront_json *j, void *ctx, const char *key, size_t n) {
	struct cfront_oci *sp = ctx;
	sp->hooks_n++;
	if (key && cfront_ascii(key, n) && (n != sizeof CFRONT_POSTSTOP - 1 || strncasecmp(key, CFRONT_POSTSTOP, n) != 0))
		return cfront_value(j); // another stage's hooks
	cfront_ws(&j->r);
	const char *at = j->r.p;
	// runc reads the stages' names without regard to case (a struct),
	// the shim as they are (a map); a second poststop wins in the shim.
	if (!key || n != sizeof CFRONT_POSTSTOP - 1 || memcmp(key, CFRONT_POSTSTOP, n) != 0 || sp->poststop_at || !cfront_null(j)) {
		sp->hooks_odd = 1;
		return cfront_null(j) || cfront_value(j);
	}
	sp->poststop_at = at, sp->poststop_end = j->r.p;
	return 1;
}

static inline int cfront_hooks(struct cfront_json *j, struct cfront_oci *sp) {
	cfront_ws(&j->r);
	sp->hooks_at = j->r.p;
	int ok;
	if (cfront_null(j)) {
		ok = 1;
	} else if (j->r.p < j->r.end && *j->r.p == '{') {
		ok = cfront_object(j, cfront_hooks_member, sp);
	} else {
		sp->hooks_odd = 1; // Go refuses it
		ok = cfront_value(j);
	}
	sp->hooks_end = j->r.p;
	return ok;
}

static inline int cfront_spec_member(struct cfront_json *j, void *ctx, const char *key, size_t n) {
	struct cfront_level *l = ctx, inner = {0, l->spec};
	const char *s;
	size_t sn;
	switch (cfront_field(cfront_spec_names, &l->seen, key, n)) {
	case -1:
		return cfront_value(j);
	case 0:
		return cfront_text(j, &s, &sn);
	case 1:
		return cfront_null(j) || cfront_object(j, cfront_annotation_member, l->spec); // map[string]string
	case 2:
		if (cfront_null(j))
			return 1;
		l->spec->process = 1;
		return cfront_object(j, cfront_process_member, &inner);
	case 3:
		return cfront_null(j) || cfront_object(j, cfront_linux_member, &inner);
	case 4:
		return cfront_hooks(j, l->spec);
	}
	return 0;
}

// cfront_read_spec reads config.json as hook.leanSpec and shim.ParseSpec
// do; 0 means "not sure". The caller bounds len.
static inline int cfront_read_spec(const char *buf, size_t len, struct cfront_oci *sp) {
	struct cfront_json j = {{buf, buf + len}, 0};
	struct cfront_level top = {0, sp};
	*sp = (struct cfront_oci){0};
	cfront_ws(&j.r);
	sp->top = j.r.p;
	if (!cfront_object(&j, cfront_spec_member, &top))
		return 0;
	cfront_ws(&j.r);
	return j.r.p == j.r.end && cfront_ascii(sp->path, sp->path_n);
}
#endif
