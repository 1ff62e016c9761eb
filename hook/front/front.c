// sforge-hook's front: see doc.go for why this is C.
//
// It runs as an ELF constructor, before the Go runtime starts, for four
// cases. `sforge-hook poststop` for a container whose network namespace was
// its own (no path: it died with the container, and the rules with it) or
// whose namespace path is gone: the Go hook returns there without doing or
// logging anything (hook.poststop); the front exits 0 instead of starting
// it. `sforge-hook poststop` for a container whose namespace outlives it
// (a path that exists: a bind mount, another container's, a pod's) and
// whose allowlist the front reads without doubt: it removes our table
// there itself, hands the netlink socket to a holder as hook.holdNetlink
// does, and logs the Go hook's line. `sforge-hook createRuntime` (or
// prestart) for a container whose allowlist, capabilities and namespace
// the front reads without doubt: it installs the nftables table itself
// (internal/cfront/nft.h, the C mirror of engine/nftables) and logs the
// line the Go hook would. Whenever anything is not exactly as expected it
// leaves the decision to the Go hook, with the state it read from stdin
// put back where the Go hook reads it: every decision here can only fall
// back, or refuse. And the hook's internal `hold-netlink` mode
// (hook.hold), which only waits.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "allow.h"
#include "cfront.h"
#include "front.h"
#include "nft.h"
#include "spec.h"

extern char **environ;

// The bound of hook/state.go's maxStateBytes (CFRONT_MAX_SPEC is its
// maxSpecBytes).
#define MAX_STATE (1 << 20)

// What the hook's arguments and environment ask for (hook.ParseArgs).
enum stage { STAGE_OTHER, STAGE_INSTALL, STAGE_POSTSTOP };

struct opts {
	enum stage stage;
	const char *log;    // hook.DefaultLogPath, $SFORGE_HOOK_LOG, --log
	const char *engine; // auto, $SFORGE_ENGINE, --engine
	int realtime;       // $SFORGE_INSTALL_PRIORITY is not normal
};

// read_opts mirrors hook.ParseArgs for the arguments it accepts without
// error; STAGE_OTHER for anything else (the Go hook's to report).
static enum stage read_opts(int argc, char **args, struct opts *o) {
	const char *env = getenv("SFORGE_ENGINE");
	o->stage = STAGE_OTHER;
	o->log = "/var/log/sforge/hook.log";
	o->engine = "auto";
	const char *log = getenv("SFORGE_HOOK_LOG");
	if (log && *log)
		o->log = log;
	if (env && *env) {
		if (!cfront_in(cfront_engines, env, strlen(env)))
			return STAGE_OTHER;
		o->engine = env;
	}
	const char *prio = getenv("SFORGE_INSTALL_PRIORITY");
	if (prio && *prio && !cfront_in(cfront_priorities, prio, strlen(prio)))
		return STAGE_OTHER;
	o->realtime = !prio || strcmp(prio, "normal") != 0;
	if (argc < 1)
		return STAGE_OTHER;
	enum stage stage;
	if (strcmp(args[0], "poststop") == 0)
		stage = STAGE_POSTSTOP;
	else if (strcmp(args[0], "createRuntime") == 0 || strcmp(args[0], "prestart") == 0)
		stage = STAGE_INSTALL;
	else
		return STAGE_OTHER;
	for (int i = 1; i < argc; i++) {
		const char *a = args[i], *eq = strchr(a, '=');
		size_t n = eq ? (size_t)(eq - a) : strlen(a);
		int engine = n == 8 && memcmp(a, "--engine", 8) == 0;
		if (!engine && !(n == 5 && memcmp(a, "--log", 5) == 0))
			return STAGE_OTHER;
		const char *v = eq ? eq + 1 : (++i < argc ? args[i] : NULL);
		if (!v || !*v || (engine && !cfront_in(cfront_engines, v, strlen(v))))
			return STAGE_OTHER;
		if (engine)
			o->engine = v;
		else
			o->log = v;
	}
	return o->stage = stage;
}

int sforge_hook_front_args(int argc, char **args) {
	struct opts o;
	return read_opts(argc, args, &o) == STAGE_POSTSTOP;
}

int sforge_hook_front_opts(int argc, char **args, const char **engine, const char **log, int *realtime) {
	struct opts o;
	enum stage stage = read_opts(argc, args, &o);
	*engine = o.engine;
	*log = o.log;
	*realtime = o.realtime;
	return stage == STAGE_POSTSTOP ? 2 : stage == STAGE_INSTALL;
}

// The OCI state: the members of ReadState's lean struct.
static const char *const state_names[] = {"ociVersion", "id", "status", "pid", "bundle", NULL};

struct state {
	unsigned seen;
	const char *bundle, *id;
	size_t bundle_n, id_n;
	long pid;
};

static int state_member(struct cfront_json *j, void *ctx, const char *key, size_t n) {
	struct state *st = ctx;
	int f = cfront_field(state_names, &st->seen, key, n);
	if (f < 0)
		return f == -1 && cfront_value(j);
	if (f == 3) // ReadState refuses a negative pid
		return cfront_int(&j->r, &st->pid) && st->pid >= 0;
	const char *s;
	size_t sn;
	if (!cfront_span(&j->r, &s, &sn))
		return 0; // null or a number: Go's to say
	if (f == 1)
		st->id = s, st->id_n = sn;
	else if (f == 4)
		st->bundle = s, st->bundle_n = sn;
	return 1;
}

// read_state reads the OCI state as ReadState does and makes its checks,
// with a bundle that filepath.Join leaves as it is and that holds what Go
// would read (it replaces invalid UTF-8), NUL-terminated in bundle.
static int read_state(const char *buf, size_t len, struct state *st, char *bundle, size_t cap) {
	struct cfront_json j = {{buf, buf + len}, 0};
	*st = (struct state){0};
	if (len > MAX_STATE || !cfront_object(&j, state_member, st))
		return 0;
	cfront_ws(&j.r);
	if (j.r.p != j.r.end || st->id_n == 0 || !st->bundle || st->bundle_n >= cap ||
	    !cfront_ascii(st->bundle, st->bundle_n) || !cfront_clean_abs(st->bundle, st->bundle_n))
		return 0;
	memcpy(bundle, st->bundle, st->bundle_n);
	bundle[st->bundle_n] = '\0';
	return 1;
}

int sforge_hook_front_state(const char *buf, size_t len, char *bundle, size_t cap) {
	struct state st;
	return read_state(buf, len, &st, bundle, cap);
}


int sforge_hook_front_spec(const char *buf, size_t len, int *net, char *path, size_t cap) {
	struct cfront_oci sp;
	*net = 0;
	path[0] = '\0';
	if (len > CFRONT_MAX_SPEC || !cfront_read_spec(buf, len, &sp) || sp.path_n >= cap)
		return 0;
	*net = sp.net;
	if (sp.path_n)
		memcpy(path, sp.path, sp.path_n);
	path[sp.path_n] = '\0';
	return 1;
}

int sforge_hook_front_idle(const char *buf, size_t len) {
	struct state st;
	char bundle[4096];
	if (!read_state(buf, len, &st, bundle, sizeof bundle))
		return 0;
	size_t n;
	char *data = cfront_spec(bundle, CFRONT_MAX_SPEC, &n);
	struct cfront_oci sp;
	int ok = data && cfront_read_spec(data, n, &sp), net = sp.net, idle = !net || !sp.path_n;
	char path[4096];
	if (ok && !idle && sp.path_n < sizeof path) {
		memcpy(path, sp.path, sp.path_n);
		path[sp.path_n] = '\0';
		// hook.poststop: no network namespace, none with a path, or its
		// path gone (os.IsNotExist: ENOENT alone).
		struct stat sb;
		idle = stat(path, &sb) != 0 && errno == ENOENT;
	}
	free(data);
	return ok && idle;
}

// log_line is hook.Logger.Printf: one line, stamped with the time as
// time.RFC3339Nano writes it in UTC, appended in a single write; a log
// that cannot be written is skipped.
__attribute__((format(printf, 2, 3))) static void log_line(const char *path, const char *format, ...) {
	char line[1024];
	size_t n = cfront_rfc3339(line, sizeof line - 1, 1);
	line[n++] = ' ';
	va_list ap;
	va_start(ap, format);
	int k = vsnprintf(line + n, sizeof line - n - 1, format, ap);
	va_end(ap);
	if (k < 0 || (size_t)k >= sizeof line - n - 1)
		return; // ids and paths are bounded well below; never a cut line
	n += (size_t)k;
	line[n++] = '\n';
	cfront_append(path, line, n, 0640, 0750);
}

// read_bundle reads the state in buf and its bundle's config.json as
// ReadState and LoadSpec do: the document (the caller frees it; sp's
// strings point into it), or NULL when either is not one the front is
// sure of.
static char *read_bundle(const char *buf, size_t len, struct state *st, struct cfront_oci *sp) {
	char bundle[4096];
	if (!read_state(buf, len, st, bundle, sizeof bundle))
		return NULL;
	size_t n;
	char *data = cfront_spec(bundle, CFRONT_MAX_SPEC, &n);
	if (data && (!cfront_read_spec(data, n, sp) || sp->unsure)) {
		free(data);
		return NULL;
	}
	return data;
}

// nft_engine reports whether engine is one the C engine may stand for:
// auto (nftables where the kernel has it, cfront_kernel_nft) or nftables;
// the iptables ones are the Go engine's.
static int nft_engine(const char *engine) { return strcmp(engine, "auto") == 0 || strcmp(engine, "nftables") == 0; }

// decode_allowlist is policy.Lookup's choice (the annotation first, else
// the environment) decoded as policy.Decode does: 0 when the C is not sure.
static int decode_allowlist(const struct cfront_oci *sp, struct cfront_allowlist *a) {
	return sp->ann ? cfront_allow_decode(sp->ann_v, sp->ann_n, a) : cfront_allow_decode(sp->env_v, sp->env_n, a);
}

// Why the front left a createRuntime's install to the Go hook (front.Left),
// logged by the Go hook with it; NULL when it made no such decision.
const char *sforge_hook_front_left;

// go_because records why the front leaves the install to Go.
static int go_because(const char *why) {
	sforge_hook_front_left = why;
	return DECIDE_GO;
}

// decide is hook.install up to the engine, for what the front reads
// without doubt: DECIDE_NOTHING when the container has no allowlist (the Go
// hook touches nothing and logs nothing), DECIDE_INSTALL with *d filled in
// when the rules must go in, DECIDE_GO for everything else, the Go hook's
// refusals included, so that the user reads its message. host lists the
// namespaces a container must not share (hook.hostNetNS).
int sforge_hook_front_decide(const char *buf, size_t len, const char *engine, const char *const *host,
                             struct sforge_hook_decision *d) {
	sforge_hook_front_left = NULL;
	if (!nft_engine(engine))
		return go_because("an iptables engine");
	struct state st;
	struct cfront_oci sp;
	char *data = read_bundle(buf, len, &st, &sp);
	if (!data || !cfront_ascii(st.id, st.id_n) || st.id_n >= sizeof d->id) {
		free(data);
		return go_because("a state or config.json the front cannot read (an escape where it reads, a member it is not sure of, or not JSON)");
	}
	if (!sp.ann && !sp.env) {
		free(data);
		return DECIDE_NOTHING;
	}
	int ok = decode_allowlist(&sp, &d->allow);
	free(data); // sp's strings point into it
	if (!ok)
		return go_because("an allowlist that does not decode");
	if (st.pid <= 0 || !sp.net)
		return go_because("no pid, or no network namespace");
	if (!sp.process || !sp.caps || sp.admin_cap || sp.net_raw)
		return go_because("capabilities the Go hook refuses, or none listed");
	memcpy(d->id, st.id, st.id_n);
	d->id[st.id_n] = '\0';
	snprintf(d->netns, sizeof d->netns, "/proc/%ld/ns/net", st.pid);
	// sharesNetNS: an error, or one of the host's namespaces.
	struct stat nsb;
	if (stat(d->netns, &nsb) != 0 || cfront_host_ns(&nsb, host))
		return go_because("the host's network namespace, or one it cannot inspect");
	if (!cfront_kernel_nft())
		return go_because("no nf_tables in the kernel");
	if (!cfront_chain_name(st.id, st.id_n, d->table, sizeof d->table))
		return go_because("a container id the front does not name");
	return DECIDE_INSTALL;
}

// decide_remove is hook.poststop up to the engine, for what the front reads
// without doubt: REMOVE_NOTHING where the Go hook returns without doing or
// logging anything (no namespace path, a path gone, no allowlist),
// REMOVE_TABLE with *d filled in where it removes our table from a
// namespace that outlives the container (a bind mount, or another
// container's that it joined), REMOVE_GO for everything else (the Go hook
// then decides, and may also return without a word). host is as for
// sforge_hook_front_decide.
int sforge_hook_front_decide_remove(const char *buf, size_t len, const char *engine, const char *const *host,
                                    struct sforge_hook_removal *d) {
	struct state st;
	struct cfront_oci sp;
	char *data = read_bundle(buf, len, &st, &sp);
	if (!data)
		return REMOVE_GO;
	// The namespace first, as hook.poststop: none, no path, or its path
	// gone (pathExists: anything but ENOENT counts as there).
	if (!sp.net || !sp.path_n) {
		free(data);
		return REMOVE_NOTHING;
	}
	if (sp.path_n >= sizeof d->netns) {
		free(data);
		return REMOVE_GO;
	}
	memcpy(d->netns, sp.path, sp.path_n);
	d->netns[sp.path_n] = '\0';
	struct stat nsb;
	if (stat(d->netns, &nsb) != 0) {
		int gone = errno == ENOENT;
		free(data);
		return gone ? REMOVE_NOTHING : REMOVE_GO;
	}
	if (!sp.ann && !sp.env) {
		free(data);
		return REMOVE_NOTHING; // policy.Lookup: not found
	}
	// An allowlist the C does not decode may be one Go refuses (it then
	// returns in silence) or one the C is unsure of: Go's either way.
	struct cfront_allowlist allow;
	int ok = decode_allowlist(&sp, &allow);
	free(data); // sp's strings point into it
	// A namespace of the host's (or one sharesNetNS cannot compare): the
	// Go hook returns, nothing of ours is there. An iptables engine: the
	// Go engine's.
	if (!ok || cfront_host_ns(&nsb, host) || !nft_engine(engine))
		return REMOVE_GO;
	if (!cfront_ascii(st.id, st.id_n) || st.id_n >= sizeof d->id || !cfront_kernel_nft() ||
	    !cfront_chain_name(st.id, st.id_n, d->table, sizeof d->table))
		return REMOVE_GO;
	memcpy(d->id, st.id, st.id_n);
	d->id[st.id_n] = '\0';
	return REMOVE_TABLE;
}

// hand_off is hook.holdNetlink: the last close of a netfilter netlink socket
// that deleted anything waits for the kernel's RCU grace period (8-16 ms
// here), which runc would wait for in this process's exit. A copy of the
// hook in its hold-netlink mode (its C front, hold() below: no Go start)
// keeps a duplicate of sock as descriptor 3 until this process has exited
// (the end of its stdin, a pipe whose write end only this process holds,
// left open until the exit), in a session of its own, its output
// /dev/null so that runc does not wait for it either. sock is closed
// here. 1 when the copy started; 0 (errno set) when the wait is to happen
// here.
static int hand_off(int sock) {
	// Not descriptor 3 itself: a dup2 onto the same number would leave it
	// close-on-exec.
	int dup = fcntl(sock, F_DUPFD_CLOEXEC, 4);
	if (dup < 0)
		return 0; // sock stays open: the wait happens at this exit
	close(sock);
	int p[2];
	if (pipe2(p, O_CLOEXEC) != 0)
		return 0; // dup stays open: the wait happens at this exit
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	posix_spawn_file_actions_init(&fa);
	posix_spawnattr_init(&at);
	posix_spawn_file_actions_adddup2(&fa, p[0], 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	posix_spawn_file_actions_adddup2(&fa, dup, 3);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSID);
	char *argv[] = {"/proc/self/exe", "hold-netlink", NULL};
	pid_t pid;
	int r = posix_spawn(&pid, "/proc/self/exe", &fa, &at, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(p[0]);
	if (r != 0) {
		close(p[1]);
		errno = r;
		return 0; // dup stays open: the wait happens at this exit
	}
	close(dup);
	// p[1] is never closed here: the exit closes it, which ends the copy.
	return 1;
}

// remove_table is hook.poststop's removal with the nftables engine, and its
// log line: REMOVE_NOTHING when done (the poststop ends here), REMOVE_GO
// when the C did not remove and the Go hook is to (its removal deletes
// whether or not the table is still there).
static int remove_table(const struct opts *o, const struct sforge_hook_removal *d) {
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int fd = open(d->netns, O_RDONLY | O_CLOEXEC); // nft.h checks it is a namespace
	if (fd < 0)
		return REMOVE_GO;
	static struct cf_nft nft;
	int sock = cfront_nft_remove(&nft, fd, d->table);
	int err = errno;
	close(fd);
	if (sock == -1)
		return REMOVE_GO;
	int handed = 0;
	if (sock >= 0) {
		handed = hand_off(sock);
		if (!handed)
			log_line(o->log, "remove container=%s: no holder for the netlink socket (%s); waiting for the kernel here",
			         d->id, strerror(errno));
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	char took[32];
	cfront_duration(took, sizeof took, (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
	if (sock == -2) {
		// Still in the container's namespace: nothing more runs here. A
		// poststop never fails a deletion; the table stays (more
		// restrictive, never less).
		log_line(o->log,
		         "remove container=%s engine=nftables netns=%s duration=%s result=error: cannot return to the hook's own network namespace: %s front=c",
		         d->id, d->netns, took, strerror(err));
		return REMOVE_NOTHING;
	}
	log_line(o->log, "remove container=%s engine=nftables netns=%s duration=%s result=ok%s front=c", d->id, d->netns, took,
	         handed ? " socket=handed-off" : "");
	return REMOVE_NOTHING;
}

// install_timed is install with its log line timed; sched is the thread's
// schedstat (cfront_schedstat_open), -1 if none; rt the real-time window
// it ends once the rules are in (or not).
static int install_timed(const struct opts *o, const char *stage, const struct sforge_hook_decision *d, int sched,
                         struct cfront_rt *rt) {
	struct timespec t0, c0;
	struct rusage r0, r1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
	getrusage(RUSAGE_THREAD, &r0);
	long long queued0 = cfront_run_delay(sched);
	int fd = open(d->netns, O_RDONLY | O_CLOEXEC); // nft.h checks it is a namespace
	if (fd < 0)
		return 0;
	// The hook installs once: its state is static storage, zero, and
	// never unmapped (a free of it cost 0.1-0.2 ms here). Its pages are
	// new to this process: mapped in one call, not in the 11 page faults
	// the install took touching them.
	static struct cf_nft nft;
	cfront_populate(&nft, sizeof nft);
	int rules = cfront_nft_prepare(&nft, d->table, &d->allow) ? cfront_nft_apply(&nft, fd) : 0;
	int err = errno;
	close(fd);
	long long queued1 = cfront_run_delay(sched);
	struct timespec t1, c1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
	int realtime = rt->on;
	cfront_rt_end(rt);
	if (rules < 0) {
		// The thread is still in the container's namespace: nothing more
		// runs here, and the container must not start.
		const char *cause = "failed to install the egress rules: cannot return to the hook's own network namespace";
		const char *fix = "the container was not started; start it again, with SFORGE_HOOK_NO_FRONT=1 in the hook's environment if it recurs";
		log_line(o->log, "refuse stage=%s container %s: %s: %s; %s", stage, d->id, cause, strerror(err), fix);
		fprintf(stderr, "sforge-hook: container %s: %s: %s; %s\n", d->id, cause, strerror(err), fix);
		return -1;
	}
	if (rules == 0) {
		sforge_hook_front_left = "its engine did not install (our table there already, or the kernel refused)";
		return 0;
	}
	getrusage(RUSAGE_THREAD, &r1);
	// The Go hook's line, then the install's CPU time (the wall time
	// less what it spent waiting for a CPU or the kernel), its context
	// switches (voluntary: it waited for something; involuntary: it was
	// preempted), its wait on the run queue (the shim logs these too) and
	// the mark of the front.
	char took[32], cpu[32], queued[48];
	cfront_duration(took, sizeof took, (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
	cfront_duration(cpu, sizeof cpu, (c1.tv_sec - c0.tv_sec) * 1000000000LL + (c1.tv_nsec - c0.tv_nsec));
	cfront_queued(queued, sizeof queued, queued0, queued1);
	log_line(o->log, "install container=%s stage=%s engine=nftables chain=%s rules=%d ipv6=filtered duration=%s cpu=%s switches=%ld/%ld%s priority=%s front=c",
	         d->id, stage, d->table, rules, took, cpu, r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw, queued,
	         realtime ? "realtime" : "normal");
	return 1;
}

// install does what decide decided, as the nftables engine's Install and
// hook.install's log line: 1 when the rules are in, 0 to leave it to the
// Go hook (nothing of ours is left in the namespace), -1 when the
// container must not start (the reason is on stderr and in the log).
static int install(const struct opts *o, const char *stage, const struct sforge_hook_decision *d) {
	// The wait for a CPU, as the shim's front logs it: read at both ends
	// inside the window.
	int sched = cfront_schedstat_open();
	// The window at real-time priority (cfront.h): no normal task
	// preempts the install.
	static struct cfront_rt rt;
	cfront_rt_begin(&rt, o->realtime);
	int r = install_timed(o, stage, d, sched, &rt);
	cfront_rt_end(&rt); // the window's early ends
	if (sched >= 0)
		close(sched);
	return r;
}

// put_back makes what was read from stdin readable again at fd 0, from a
// memory file. Should that fail, the Go hook reads what is left of stdin: a
// truncated state, which it logs and returns on (poststop never fails a
// container's deletion).
static void put_back(int keep, const char *buf, size_t n) {
	if (cfront_write_all(keep, buf, n) && lseek(keep, 0, SEEK_SET) == 0)
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
	struct opts o;
	enum stage stage = argc < 2 ? STAGE_OTHER : read_opts(argc - 1, argv + 1, &o);
	if (stage == STAGE_OTHER)
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
		static const char *const host[] = {"/proc/1/ns/net", "/proc/self/ns/net", NULL};
		if (!err && stage == STAGE_POSTSTOP) {
			if (sforge_hook_front_idle(buf, n))
				_exit(0);
			static struct sforge_hook_removal rm;
			int r = sforge_hook_front_decide_remove(buf, n, o.engine, host, &rm);
			if (r == REMOVE_TABLE)
				r = remove_table(&o, &rm);
			if (r != REMOVE_GO)
				_exit(0);
		}
		if (!err && stage == STAGE_INSTALL) {
			static struct sforge_hook_decision d;
			int r = sforge_hook_front_decide(buf, n, o.engine, host, &d);
			if (r == DECIDE_INSTALL)
				r = install(&o, argv[1], &d);
			if (r != DECIDE_GO)
				_exit(r > 0 ? 0 : 1);
		}
		if (n > 0) // nothing read: the Go hook reads the same end or error
			put_back(keep, buf, n);
		free(buf);
	}
	close(keep);
}

