// The isolated create in C: what the Go shim does for a create of a
// container whose namespace it does not make (create.go, modeAfterCreate),
// for the containers with a network namespace of their own or given by path,
// in a user namespace (dockerd --userns-remap) or not.
//
// Docker and containerd create most isolated containers with a network
// namespace of their own; `--network container:X` and `ctr run --with-ns`
// name one by path. For such a spec the Go shim writes at most two changes
// into config.json (CAP_NET_RAW dropped, where `sforge run` has not had
// Docker leave it out already; and for a namespace by path, which outlives
// the container, the poststop hook that removes the rules); the rest is its
// isolation: run `runc create`,
// then install the rules in the namespace of the container's init process,
// which waits for `runc start` and has run nothing of the user's. This file
// does that before the Go runtime starts, with the C engine
// (internal/cfront/nft.h), and exits 0 only once the rules are installed
// and the kernel's echo of them checked. The Go shim's own start (a Go
// process, more than the whole install) is what it saves.
//
// Before runc create, anything the front is not sure of (a spec it does not
// read as Go would, one Go would refuse, an engine other than nftables,
// socket activation, no --pid-file) goes to the Go shim, which decides as
// before. After it, the container exists: if the C engine did not install
// (0), or the process or its namespace are not as expected, the front hands
// the created container to the Go shim (sforge_front_created), which
// installs with the Go engine or deletes the container and fails. Only a
// thread that cannot leave the container's namespace (-1) ends here: the
// front deletes the container and fails, with one line.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "allow.h"
#include "cfront.h"
#include "front.h"
#include "nft.h"
#include "spec.h"

extern char **environ;

// The shim's names (shim/config.go) for the hook entry it adds.
#define HOOK_PROCS_ENV "GOMAXPROCS=1"
#define HOOK_LOG_ENV "SFORGE_HOOK_LOG"
#define DEFAULT_HOOK_TIMEOUT 10

// The host's network namespaces, as the shim's hostNetNS names them
// (init's, and the front's own: it has one thread).
static const char *const host_namespaces[] = {"/proc/1/ns/net", "/proc/self/ns/net", NULL};

// Set once runc has created the container and the front leaves the rest to
// the Go shim (front.Created).
int sforge_front_created;

// Why sforge_front_plan_create left an isolated create to the Go shim
// (front.Left): the shim logs it with the create, so that a user can see
// why a start took the slower path. NULL when the front made no such
// decision.
const char *sforge_front_left;

// runc's container ids (libcontainer's idRegex, ^[\w+-\.]+$).
static int runc_id(const char *s) {
	if (!*s || strlen(s) >= 256)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || strchr("_+-.", *s)))
			return 0;
	return 1;
}

// An edit of config.json: the bytes from at to end replaced by a
// capability list without CAP_NET_RAW (caps), or by text.
struct edit {
	const char *at, *end;
	const struct cfront_caps_list *caps;
	const char *text;
	size_t text_n;
};

// edit_spec applies the edits, which do not overlap, to the document; every
// other byte stays as it is. A capability list is written anew without
// CAP_NET_RAW (Spec.DropCapability: the kept elements joined by ",", a null
// one as "", which is what it decodes to and what Go writes back). It
// returns the new document (the caller frees it), NULL when a list is
// longer than the reader kept or there is no memory.
static char *edit_spec(const char *spec, size_t len, struct edit *edits, int k, size_t *n) {
	size_t cap = len + 1;
	for (int i = 0; i < k; i++) {
		if (edits[i].caps && edits[i].caps->n > CFRONT_MAX_CAPS)
			return NULL;
		cap += edits[i].text_n;
		for (int at = i; at > 0 && edits[at - 1].at > edits[at].at; at--) { // in document order
			struct edit e = edits[at];
			edits[at] = edits[at - 1];
			edits[at - 1] = e;
		}
	}
	char *out = malloc(cap);
	if (!out)
		return NULL;
	const char *from = spec;
	*n = 0;
	for (int i = 0; i < k; i++) {
		const struct edit *e = &edits[i];
		memcpy(out + *n, from, (size_t)(e->at - from));
		*n += (size_t)(e->at - from);
		from = e->end;
		if (!e->caps) {
			memcpy(out + *n, e->text, e->text_n);
			*n += e->text_n;
			continue;
		}
		const struct cfront_caps_list *l = e->caps;
		out[(*n)++] = '[';
		int first = 1;
		for (size_t x = 0; x < l->n; x++) {
			if (l->elem[x].raw)
				continue;
			if (!first)
				out[(*n)++] = ',';
			first = 0;
			size_t w = (size_t)(l->elem[x].end - l->elem[x].at);
			if (w == 4 && memcmp(l->elem[x].at, "null", 4) == 0)
				memcpy(out + *n, "\"\"", w = 2);
			else
				memcpy(out + *n, l->elem[x].at, w);
			*n += w;
		}
		out[(*n)++] = ']';
	}
	memcpy(out + *n, from, (size_t)(spec + len - from));
	*n += (size_t)(spec + len - from);
	return out;
}

// A JSON text being built in a fixed buffer; ok drops to 0 when it does
// not fit or a string is not one the front writes.
struct text {
	char buf[12288];
	size_t n;
	int ok;
};

static void put(struct text *t, const char *s) {
	size_t n = strlen(s);
	if (!t->ok || t->n + n >= sizeof t->buf) {
		t->ok = 0;
		return;
	}
	memcpy(t->buf + t->n, s, n);
	t->n += n;
}

// put_chars writes s as the inside of a JSON string: ASCII only
// (encoding/json writes invalid UTF-8 as U+FFFD; the Go shim's to do),
// control characters and the two that must be escaped escaped.
static void put_chars(struct text *t, const char *s) {
	char esc[8];
	for (; *s && t->ok; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch > 0x7f) {
			t->ok = 0;
		} else if (ch < 0x20 || ch == '"' || ch == '\\') {
			snprintf(esc, sizeof esc, "\\u%04x", ch);
			put(t, esc);
		} else {
			put(t, (char[2]){(char)ch, 0});
		}
	}
}

static void put_string(struct text *t, const char *s) {
	put(t, "\"");
	put_chars(t, s);
	put(t, "\"");
}

// poststop_hook writes the hook entry Shim.Isolate adds for a namespace
// given by path: sforge-hook poststop (with the engine when one is
// forced), one P, the hook's log setting when the shim has one, the
// timeout.
static void poststop_hook(struct text *t, const char *hook, const char *engine, long timeout, const char *hook_log) {
	char num[32];
	put(t, "{\"path\":");
	put_string(t, hook);
	put(t, ",\"args\":[\"" SFORGE_HOOK_NAME "\",\"poststop\"");
	if (*engine && strcmp(engine, "auto") != 0) {
		put(t, ",\"--engine\",");
		put_string(t, engine);
	}
	put(t, "],\"env\":[\"" HOOK_PROCS_ENV "\"");
	if (hook_log && *hook_log) {
		put(t, ",\"" HOOK_LOG_ENV "=");
		put_chars(t, hook_log);
		put(t, "\"");
	}
	snprintf(num, sizeof num, "],\"timeout\":%ld}", timeout > 0 ? timeout : DEFAULT_HOOK_TIMEOUT);
	put(t, num);
}

// plan_poststop adds to edits (k of them so far) the poststop hook of a
// namespace given by path, written into t, where Spec.AddHook puts it: a
// hooks member made, a null one replaced, or the stage added to the
// object. It returns the new count, -1 when the spec's hooks are not ones
// the front edits (a poststop already listed, a hooks value Go would
// refuse) or the settings not ones it writes: the Go shim decides those.
static int plan_poststop(const struct cfront_oci *sp, const struct sforge_front_cfg *c, const char *hook_log,
                         struct edit *edits, int k, struct text *t) {
	char hook[4096];
	struct stat st;
	if (sp->hooks_odd || !sforge_front_hook(c, hook, sizeof hook))
		return -1;
	// Isolate refuses a hook that is missing or not executable.
	if (stat(hook, &st) != 0 || !S_ISREG(st.st_mode) || !(st.st_mode & 0111))
		return -1;
	struct edit e = {0};
	const char *head, *tail;
	if (sp->poststop_at) { // "poststop": null
		e.at = sp->poststop_at, e.end = sp->poststop_end;
		head = "[", tail = "]";
	} else if (sp->hooks_at && sp->hooks_end - sp->hooks_at == 4 && memcmp(sp->hooks_at, "null", 4) == 0) {
		e.at = sp->hooks_at, e.end = sp->hooks_end;
		head = "{\"poststop\":[", tail = "]}";
	} else if (sp->hooks_at) {
		e.at = e.end = sp->hooks_at + 1; // just inside its '{'
		head = "\"poststop\":[", tail = sp->hooks_n ? "]," : "]";
	} else {
		e.at = e.end = sp->top + 1; // the document has members: the allowlist's
		head = "\"hooks\":{\"poststop\":[", tail = "]},";
	}
	*t = (struct text){.ok = 1};
	put(t, head);
	poststop_hook(t, hook, c->engine, c->hook_timeout, hook_log);
	put(t, tail);
	if (!t->ok)
		return -1;
	e.text = t->buf, e.text_n = t->n;
	edits[k] = e;
	return k + 1;
}

// write_spec is the shim's Spec.Flush (replaceFile): the document in a
// temporary file beside <bundle>/config.json, with its mode, renamed over
// it. 0 when it cannot (the Go shim tries again and reports).
static int write_spec(const char *bundle, const char *data, size_t n) {
	char path[4096], tmp[4096 + 32];
	size_t b = strlen(bundle);
	if (b && bundle[b - 1] == '/')
		b--; // strings.TrimSuffix(bundle, "/")
	if (b + sizeof "/config.json" + sizeof ".config.json.sforge-XXXXXX" > sizeof path)
		return 0;
	if (b)
		snprintf(path, sizeof path, "%.*s/config.json", (int)b, bundle);
	else
		strcpy(path, "config.json");
	const char *slash = strrchr(path, '/');
	size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
	snprintf(tmp, sizeof tmp, "%.*s.config.json.sforge-XXXXXX", (int)dir, path);
	struct stat st;
	if (stat(path, &st) != 0)
		return 0;
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return 0;
	int ok = cfront_write_all(fd, data, n) && fchmod(fd, st.st_mode & 0777) == 0;
	ok = close(fd) == 0 && ok && rename(tmp, path) == 0;
	if (!ok)
		unlink(tmp);
	return ok;
}

// left records why the front leaves a create to Go; it returns 0, the
// plan's "not mine".
static int left(const char *why) {
	sforge_front_left = why;
	return 0;
}

int sforge_front_plan_create(int argc, char **args, const char *spec, size_t len, const struct sforge_front_cfg *c,
                             const char *listen_fds, const char *hook_log, struct sforge_front_plan *p) {
	struct sforge_front_create_args a;
	struct cfront_oci sp;
	struct text hook_text; // until edit_spec has copied it
	const char *engine = c->engine;
	memset(p, 0, sizeof *p);
	sforge_front_left = NULL;
	// socket activation keeps runc's pid: the Go shim adds the hook.
	if (listen_fds && *listen_fds)
		return left("socket activation (LISTEN_FDS)");
	if (len > CFRONT_MAX_SPEC)
		return left("config.json larger than the front reads"); // the reader's bound, not the shim's
	if (*engine && strcmp(engine, "auto") != 0 && strcmp(engine, "nftables") != 0)
		return left("an iptables engine");
	if (!sforge_front_create_args(argc, args, &a) || a.positional != 1 || !a.pid_file || !*a.pid_file || !runc_id(a.id))
		return left("a command line the front does not read (no --pid-file, or not one id)");
	// The spec as the Go shim reads it (decide, Isolate, refuse): an
	// allowlist, nothing else of sforge's, capabilities listed and none
	// it would refuse (CAP_NET_RAW it drops, below), a network namespace
	// of its own or given by a path that is not the host's namespace. A
	// user namespace changes nothing here: the Go shim too creates such a
	// container first and installs in the namespace runc made (its own
	// namespace-first create needs the network namespace to belong to the
	// user namespace, which only runc makes), and the host's root may
	// enter, and write rules in, a namespace a child user namespace owns.
	if (!cfront_read_spec(spec, len, &sp))
		return left("config.json the front cannot read (an escape where it reads, or not JSON)");
	if (sp.unsure)
		return left("an allowlist or member the front is not sure of (repeated, null, escaped)");
	if (sp.other)
		return left("another sforge annotation");
	if (!(sp.ann || sp.env))
		return left("no allowlist where the front reads");
	if (!sp.process || !sp.caps)
		return left("no capabilities listed");
	if (sp.admin_cap)
		return left("CAP_NET_ADMIN or CAP_SYS_ADMIN listed");
	if (!sp.net || sp.path_n >= sizeof p->netns)
		return left("no network namespace of its own, or a path too long");
	memcpy(p->netns, sp.path, sp.path_n);
	p->netns[sp.path_n] = '\0';
	if (sp.path_n) {
		// refuse: the host's namespace (init's, or the front's: it has one
		// thread) by another name. A path that cannot be read is runc's
		// to report, as it is for the shim.
		struct stat st;
		if (stat(p->netns, &st) == 0 && cfront_host_ns(&st, host_namespaces))
			return left("the host's network namespace");
	}
	if (!(sp.ann ? cfront_allow_decode(sp.ann_v, sp.ann_n, &p->allow) : cfront_allow_decode(sp.env_v, sp.env_n, &p->allow)))
		return left("an allowlist that does not decode"); // Go refuses, with the decoder's message
	if (!cfront_kernel_nft())
		return left("no nf_tables in the kernel");
	if (!cfront_chain_name(a.id, strlen(a.id), p->table, sizeof p->table))
		return left("a container id the front does not name");
	// The spec as the Go shim writes it: CAP_NET_RAW dropped, and for a
	// namespace by path the poststop hook that removes the rules when the
	// container is deleted (a namespace of its own takes them with it).
	struct edit edits[6];
	int k = 0;
	for (int i = 0; i < 5 && sp.net_raw; i++)
		if (sp.cap_lists[i].raw)
			edits[k++] = (struct edit){sp.cap_lists[i].at, sp.cap_lists[i].end, &sp.cap_lists[i], NULL, 0};
	if (sp.path_n && (k = plan_poststop(&sp, c, hook_log, edits, k, &hook_text)) < 0)
		return left("hooks the front does not add to (poststop listed, or escaped)");
	if (k && !(p->edited = edit_spec(spec, len, edits, k, &p->edited_n)))
		return left("a spec the front cannot rewrite"); // a list too long to keep, or no memory
	p->value_off = (size_t)((sp.ann ? sp.ann_v : sp.env_v) - spec);
	p->value_n = sp.ann ? sp.ann_n : sp.env_n;
	strcpy(p->id, a.id);
	p->pid_file = a.pid_file;
	p->bundle = a.bundle;
	return 1;
}

static long long since(const struct timespec *t0, clockid_t clock) {
	struct timespec t1;
	clock_gettime(clock, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1000000000LL + (t1.tv_nsec - t0->tv_nsec);
}

// run_runtime is execRuntime.Run: the runtime as the front's child, with
// the front's descriptors (stdio, --preserve-fds, the console socket),
// environment and working directory, killed if the front dies. It returns
// the exit status (128+n for signal n), or -1 when the runtime did not
// start (nothing was created: the Go shim tries again and reports).
//
// The child shares the front's memory until it execs (CLONE_VM |
// CLONE_VFORK, as Go's own forkExec), so the front's pages are neither
// copied at the spawn nor made copy-on-write for the install that follows:
// a page fault costs about 10 µs on this kind of machine. The child writes
// nothing but its exec's errno into that memory.
struct spawn {
	const char *path;
	char **argv;
	pid_t parent;
	int err; // the exec's errno: it did not start
};

static int spawn_child(void *arg) {
	struct spawn *sp = arg;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != sp->parent)
		_exit(137);
	execve(sp->path, sp->argv, environ);
	sp->err = errno ? errno : ENOEXEC;
	_exit(127);
}

static int run_runtime(const char *path, char **argv) {
	// The child's stack until it execs: the front is single-threaded and
	// waits (CLONE_VFORK), so one is enough.
	static char stack[16 << 10] __attribute__((aligned(16)));
	// A caller that ignores SIGCHLD would make its children reaped
	// unseen: the front waits for this one.
	signal(SIGCHLD, SIG_DFL);
	struct spawn sp = {path, argv, getpid(), 0};
	pid_t pid = clone(spawn_child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &sp);
	if (pid < 0)
		return -1;
	int ws;
	while (waitpid(pid, &ws, 0) < 0)
		if (errno != EINTR)
			return -1; // cannot happen for our own child; Go's to report
	if (sp.err)
		return -1; // the exec failed
	return WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : -1;
}

// read_pid reads the pid runc wrote (readPIDFile); 0 when it cannot.
static long read_pid(const char *path) {
	char buf[32];
	ssize_t n = cfront_read_small(path, buf, sizeof buf - 1);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = buf, *end;
	while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')
		p++;
	if (*p < '0' || *p > '9')
		return 0;
	long pid = strtol(p, &end, 10);
	while (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r')
		end++;
	return *end || pid <= 0 || pid > 1 << 22 ? 0 : pid;
}

// open_netns is openNetNSOf: the network namespace of process pid, opened
// while a pidfd shows the process has not exited (so the namespace is not
// that of a process that reused the pid); -1 when it cannot.
static int open_netns(long pid) {
	int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	if (pidfd < 0)
		return -1;
	char path[64];
	snprintf(path, sizeof path, "/proc/%ld/ns/net", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) != 0) {
		close(fd);
		fd = -1;
	}
	close(pidfd);
	return fd;
}

// log_line is the shim's Logger.write: one line as runc's logrus writes
// it, text (time="..." level=... msg="...") or json, appended to path.
// The message holds no character that strconv.Quote or encoding/json
// would escape (ids are runc's, the rest is the front's own words).
static void log_line(const char *path, int json, const char *level, const char *msg) {
	char line[2048], ts[64];
	if (!path || !*path || !cfront_rfc3339(ts, sizeof ts, 0))
		return;
	int n = json ? snprintf(line, sizeof line, "{\"level\":\"%s\",\"msg\":\"sforge-runtime: %s\",\"time\":\"%s\"}\n", level, msg, ts)
	             : snprintf(line, sizeof line, "time=\"%s\" level=%s msg=\"sforge-runtime: %s\"\n", ts, level, msg);
	if (n > 0 && (size_t)n < sizeof line)
		cfront_append(path, line, (size_t)n, 0644, 0755);
}

// delete_container is deleteContainer: `runc delete --force` with the
// caller's global flags. It returns a note to add to the error ("" when
// the container is gone).
static const char *delete_container(const struct sforge_front_cfg *c, char **argv, int cmd, const char *id) {
	char *del[300];
	int n = 0;
	del[n++] = (char *)c->runtime;
	for (int i = 1; i < cmd && n < 290; i++)
		del[n++] = argv[i];
	del[n++] = "delete";
	del[n++] = "--force";
	del[n++] = (char *)id;
	del[n] = NULL;
	int code = run_runtime(c->runtime, del);
	return code == 0 ? "" : code < 0 ? "; failed to delete the container: the runtime did not start"
	                                 : "; failed to delete the container: runc delete --force failed";
}

void sforge_front_isolated_create(const struct sforge_front_cfg *c, char **argv, int cmd, struct sforge_front_plan *p,
                                  const struct timespec *begin) {
	// The rules' plan, made before the container exists: from runc's
	// create to the rules' check, only the netlink exchange runs. The
	// front installs once, so its state is static storage (zero, and no
	// unmapping of it on the way out).
	static struct cf_nft nft;
	if (!cfront_nft_prepare(&nft, p->table, &p->allow))
		return; // nothing was created: the Go engine plans and installs
	// The spec as the Go shim writes it before runc create: without
	// CAP_NET_RAW.
	if (p->edited && !write_spec(p->bundle, p->edited, p->edited_n))
		return; // nothing was created: the Go shim writes it, or says why
	long long spec_ns = since(begin, CLOCK_MONOTONIC);
	struct timespec t0, c0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	argv[0] = (char *)c->runtime;
	int code = run_runtime(c->runtime, argv);
	if (code < 0)
		return; // nothing was created: the Go shim starts it and reports
	if (code != 0)
		_exit(code); // runc said why; it created nothing that outlives its failure
	long long runc_ns = since(&t0, CLOCK_MONOTONIC);
	// From here the container exists: everything ends in rules installed,
	// a container deleted, or the Go shim doing one or the other.
	sforge_front_created = 1;
	// The window at real-time priority (cfront.h): from here to the
	// rules' read-back, no normal task preempts the install.
	static struct cfront_rt rt;
	cfront_rt_begin(&rt, strcmp(c->priority, "normal") != 0);
	// The thread's wait for a CPU, read at both ends inside the window:
	// the log tells the host's run queue from the install's work.
	int sched = cfront_schedstat_open();
	clock_gettime(CLOCK_MONOTONIC, &t0);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
	struct rusage r0, r1;
	getrusage(RUSAGE_THREAD, &r0);
	long long queued0 = cfront_run_delay(sched);
	long pid = read_pid(p->pid_file);
	int fd = pid ? open_netns(pid) : -1;
	// install: never the host's namespace (1 also when it cannot tell),
	// and the one the spec names, if it names one.
	struct stat st;
	if (fd >= 0 && (fstat(fd, &st) != 0 || cfront_host_ns(&st, host_namespaces) ||
	                (*p->netns && cfront_same_file(&st, p->netns) != 1))) {
		close(fd);
		fd = -1;
	}
	if (fd < 0) {
		cfront_rt_end(&rt);
		if (sched >= 0)
			close(sched);
		return; // Go reads the pid file again, or says why, and deletes
	}
	int rules = cfront_nft_apply(&nft, fd);
	int err = errno;
	close(fd);
	long long queued1 = cfront_run_delay(sched);
	long long install_ns = since(&t0, CLOCK_MONOTONIC), cpu_ns = since(&c0, CLOCK_PROCESS_CPUTIME_ID);
	int realtime = rt.on;
	cfront_rt_end(&rt);
	if (sched >= 0)
		close(sched);
	if (rules == 0)
		return; // nothing of ours left in the namespace: Go installs
	getrusage(RUSAGE_THREAD, &r1);
	char log_file[4096];
	snprintf(log_file, sizeof log_file, "%s", c->log);
	char msg[1536];
	if (rules < 0) {
		// The thread is still in the container's namespace: delete the
		// container (runc needs no namespace of ours for that) and fail.
		const char *del = delete_container(c, argv, cmd, p->id);
		snprintf(msg, sizeof msg,
		         "container %s refused: failed to install the egress rules: cannot return to the runtime's own network namespace (%s); "
		         "the container was deleted without starting; start it again, with SFORGE_RUNTIME_NO_FRONT=1 in the runtime's environment if it recurs%s",
		         p->id, strerror(err), del);
		fprintf(stderr, "sforge-runtime: %s\n", msg);
		const char *runc_log, *format;
		sforge_front_runc_log(argv, cmd, &runc_log, &format);
		log_line(runc_log, format && strcmp(format, "json") == 0, "error", msg);
		log_line(log_file, 0, "error", msg);
		_exit(1);
	}
	// The Go shim's line (create.go), and the mark of the front; it names
	// CAP_NET_RAW only when it was in the spec.
	char install[32], cpu[32], total[32], spec_d[32], runc_d[32], queued[48];
	cfront_duration(install, sizeof install, install_ns);
	cfront_duration(cpu, sizeof cpu, cpu_ns);
	cfront_duration(total, sizeof total, since(&t0, CLOCK_MONOTONIC));
	cfront_duration(spec_d, sizeof spec_d, spec_ns);
	cfront_duration(runc_d, sizeof runc_d, runc_ns);
	cfront_queued(queued, sizeof queued, queued0, queued1);
	snprintf(msg, sizeof msg,
	         "container %s: isolated before start (engine=nftables table=%s rules=%d endpoints=%zu resolvers=%zu ipv6=filtered "
	         "install=%s install-cpu=%s total=%s switches=%ld/%ld%s priority=%s spec=%s runc=%s front=c)%s",
	         p->id, p->table, rules, p->allow.n_endpoints, p->allow.n_dns, install, cpu, total,
	         r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw, queued, realtime ? "realtime" : "normal", spec_d, runc_d, p->edited ? ", CAP_NET_RAW dropped" : "");
	log_line(log_file, 0, "info", msg);
	_exit(0);
}
