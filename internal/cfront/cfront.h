// C shared by sforge's pre-runtime fronts (see doc.go). Everything here is
// static: each front compiles its own copy into its own binary.
#ifndef SFORGE_CFRONT_H
#define SFORGE_CFRONT_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

// The engines sforge accepts by name (engines.Names; the fronts' tests
// check).
static const char *const cfront_engines[] = {"auto", "nftables", "iptables", "iptables-nft", "iptables-legacy", NULL};

// cfront_in reports whether the n bytes at s are one of the strings of set.
static inline int cfront_in(const char *const *set, const char *s, size_t n) {
	for (; *set; set++)
		if (strlen(*set) == n && memcmp(*set, s, n) == 0)
			return 1;
	return 0;
}

// cfront_read_fd reads fd into buf until its end or until cap bytes are
// in. It returns how many bytes it read, and in *err 0 at the end, EFBIG
// when buf filled up first, or a read's errno.
static inline size_t cfront_read_fd(int fd, char *buf, size_t cap, int *err) {
	size_t n = 0;
	for (*err = 0; n < cap;) {
		ssize_t k = read(fd, buf + n, cap - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			*err = errno;
		if (k <= 0)
			return n;
		n += (size_t)k;
	}
	*err = EFBIG;
	return n;
}

// cfront_read_small reads the whole file at path into buf. It returns the
// length, or -1 with errno set (EFBIG: it does not fit in cap bytes).
static inline ssize_t cfront_read_small(const char *path, char *buf, size_t cap) {
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int err;
	size_t n = cfront_read_fd(fd, buf, cap, &err);
	close(fd);
	errno = err;
	return err ? -1 : (ssize_t)n;
}

// cfront_write_all writes the n bytes at buf to fd, again after EINTR or a
// short write; 0 when it could not write them all.
static inline int cfront_write_all(int fd, const char *buf, size_t n) {
	for (size_t off = 0; off < n;) {
		ssize_t w = write(fd, buf + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return 0;
		off += (size_t)w;
	}
	return 1;
}

// cfront_clean_abs reports whether the n bytes at d are an absolute path
// that filepath.Clean leaves as it is (no empty, "." or ".." element, no
// trailing slash but for "/"): a path the Go code would build or use as it
// stands.
static inline int cfront_clean_abs(const char *d, size_t n) {
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

// cfront_cmdline splits /proc/self/cmdline into argv (constructors get no
// arguments from musl, the libc the fronts link). 0 when it cannot.
static inline int cfront_cmdline(char *buf, size_t cap, char **argv, int max) {
	ssize_t len = cfront_read_small("/proc/self/cmdline", buf, cap);
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
// A reader of the JSON the fronts read, for the strict subset they decide
// on: the JSON grammar (RFC 8259), with strings read as they stand. A
// string holding an escape is one they leave to the Go code, which decodes
// it: cfront_span fails on a backslash.
struct cfront_reader {
	const char *p, *end;
};

static inline void cfront_ws(struct cfront_reader *r) {
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

// cfront_take skips white space and takes the byte c if it comes next.
static inline int cfront_take(struct cfront_reader *r, char c) {
	cfront_ws(r);
	if (r->p < r->end && *r->p == c) {
		r->p++;
		return 1;
	}
	return 0;
}

// cfront_escaped reads a string that may hold escapes, only to check it is
// valid JSON (encoding/json accepts the same): *s and *n as cfront_span
// gives them when it holds none; *s NULL when it does, since its bytes are
// then not its value.
static inline int cfront_escaped(struct cfront_reader *r, const char **s, size_t *n) {
	if (!cfront_take(r, '"'))
		return 0;
	const char *b = r->p;
	int esc = 0;
	for (; r->p < r->end; r->p++) {
		unsigned char c = (unsigned char)*r->p;
		if (c == '"') {
			*s = esc ? NULL : b;
			*n = esc ? 0 : (size_t)(r->p - b);
			r->p++;
			return 1;
		}
		if (c < 0x20)
			return 0;
		if (c != '\\')
			continue;
		esc = 1;
		if (++r->p >= r->end)
			return 0;
		if (*r->p == 'u') {
			for (int k = 0; k < 4; k++)
				if (++r->p >= r->end || !strchr("0123456789abcdefABCDEF", *r->p) || !*r->p)
					return 0;
		} else if (!strchr("\"\\/bfnrt", *r->p) || !*r->p) {
			return 0;
		}
	}
	return 0;
}

// cfront_span reads a string: its bytes start at *s, *n of them. It fails
// on invalid JSON (a control character, no closing quote, a bad escape) and
// on any escape.
static inline int cfront_span(struct cfront_reader *r, const char **s, size_t *n) {
	return cfront_escaped(r, s, n) && *s;
}

// cfront_int reads -?(0|[1-9][0-9]{0,8}), within int on every platform,
// into *v.
static inline int cfront_int(struct cfront_reader *r, long *v) {
	cfront_ws(r);
	int neg = r->p < r->end && *r->p == '-';
	r->p += neg;
	if (r->p >= r->end || *r->p < '0' || *r->p > '9')
		return 0;
	long x = 0;
	if (*r->p == '0') {
		r->p++;
	} else {
		int digits = 0;
		while (r->p < r->end && *r->p >= '0' && *r->p <= '9' && digits < 10) {
			x = x * 10 + (*r->p++ - '0');
			digits++;
		}
		if (digits > 9)
			return 0;
	}
	*v = neg ? -x : x;
	// A number must end here: "1.5", "1e3", "01" are not ours.
	return !(r->p < r->end && (*r->p == '.' || *r->p == 'e' || *r->p == 'E' || (*r->p >= '0' && *r->p <= '9')));
}
// cfront_spec reads <bundle>/config.json ("config.json" for "", where runc
// and the Go code read it too) whole into a buffer the caller frees: NULL
// when it cannot, when it is not a regular file, or when it holds more than
// max bytes. *len is its length.
static inline char *cfront_spec(const char *bundle, size_t max, size_t *len) {
	char path[4096];
	size_t n = strlen(bundle);
	if (n + sizeof "/config.json" > sizeof path)
		return NULL;
	memcpy(path, bundle, n);
	if (n && bundle[n - 1] != '/')
		path[n++] = '/';
	strcpy(path + n, "config.json");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	struct stat st;
	char *buf = NULL;
	*len = 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size <= max) {
		size_t cap = (size_t)st.st_size + 1; // one more: a file that grew is read to its end
		buf = malloc(cap);
		while (buf) {
			ssize_t k = read(fd, buf + *len, cap - *len);
			if (k < 0 && errno == EINTR)
				continue;
			if (k == 0)
				break;
			char *more = NULL;
			if (k > 0 && (*len += (size_t)k) < cap)
				continue;
			if (k > 0 && cap <= max)
				more = realloc(buf, cap = cap * 2 > max + 1 ? max + 1 : cap * 2);
			if (!more) { // a read error, more than max, or no memory
				free(buf);
				buf = NULL;
				break;
			}
			buf = more;
		}
	}
	close(fd);
	return buf;
}

// cfront_duration writes ns as time.Duration.Round(time.Microsecond).String()
// does: "812µs", "3.73ms", "1.2s".
static inline void cfront_duration(char *out, size_t cap, long long ns) {
	long long us = (ns + 500) / 1000;
	const char *unit = "µs";
	long long whole = us, frac = 0;
	int cfront_digits = 0;
	if (us >= 1000000)
		whole = us / 1000000, frac = us % 1000000, cfront_digits = 6, unit = "s";
	else if (us >= 1000)
		whole = us / 1000, frac = us % 1000, cfront_digits = 3, unit = "ms";
	if (us == 0) {
		snprintf(out, cap, "0s");
		return;
	}
	while (cfront_digits && frac % 10 == 0)
		frac /= 10, cfront_digits--;
	if (cfront_digits)
		snprintf(out, cap, "%lld.%0*lld%s", whole, cfront_digits, frac, unit);
	else
		snprintf(out, cap, "%lld%s", whole, unit);
}

// cfront_schedstat_open opens the calling thread's scheduler statistics
// for cfront_run_delay, before the window it measures, so that reading it
// there is one pread: -1 where there are none.
static inline int cfront_schedstat_open(void) {
	return open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
}

// cfront_run_delay reads from fd (cfront_schedstat_open) the time its
// thread has spent runnable but waiting for a CPU, in ns: the file's second
// field, which the kernel keeps (sched_info) whatever the schedstats
// setting. An install's share of it is what the host's run queue added to
// its wall time. The fronts read it inside their timed window, after its
// start and before its end: a wait at a system call's return on either
// side of the reading is then in the wall time, so the wall time less the
// wait never undercounts the install's own time. -1 where it cannot be
// read.
static inline long long cfront_run_delay(int fd) {
	char buf[128];
	if (fd < 0)
		return -1;
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = buf, *end;
	for (int field = 0; field < 2; field++) {
		if (*p < '0' || *p > '9')
			return -1;
		errno = 0;
		unsigned long long v = strtoull(p, &end, 10);
		if (errno || (*end != ' ' && *end != '\n'))
			return -1;
		if (field == 1)
			return v > (unsigned long long)LLONG_MAX ? -1 : (long long)v;
		p = end + 1;
	}
	return -1;
}

// cfront_queued writes " queued=<duration>", the run-queue wait between
// two cfront_run_delay readings, as the fronts' install lines carry it
// (after the CPU time), or "" when either could not be read.
static inline void cfront_queued(char *out, size_t cap, long long before, long long after) {
	static const char key[] = " queued=";
	out[0] = 0;
	if (before < 0 || after < before || cap < sizeof key + 16)
		return;
	memcpy(out, key, sizeof key);
	cfront_duration(out + sizeof key - 1, cap - (sizeof key - 1), after - before);
}

// The install window at real-time priority (cfront_rt_begin/_end).
//
// A front's install is 0.2-1 ms of CPU between runc create's return and
// the front's own. Under load, a normal (CFS) task that short is still
// preempted by every task waking up, and its wall time is then the host's
// run queue, not its work: at 32 starts at once on 2 cores, p99 was 7-30x
// p50 for the same CPU time (BENCHMARKS.md, "Sixteenth round"). At
// SCHED_FIFO priority 1, the lowest real-time priority, the window runs
// to its end once it has a CPU: no normal task preempts it (the host's
// real-time tasks above priority 1 still do). The work is the same; only
// its place in the queue changes, by under a millisecond per start.
//
// Bounded three ways, so that a fault of ours cannot hold a CPU:
//   - RLIMIT_RTTIME: after CFRONT_RT_BUDGET_US of CPU without blocking,
//     the kernel sends SIGXCPU, whose handler puts the thread back to
//     normal scheduling (the install goes on, as any process);
//   - SCHED_RESET_ON_FORK: no child (runc delete on a failure) inherits
//     the priority, and the container's processes were made before it;
//   - the kernel's own real-time throttling (kernel.sched_rt_runtime_us).
// A front without the right (CAP_SYS_NICE in the host's user namespace:
// rootless engines) runs the window as it ran before; so does one whose
// settings say "normal" (package priority: SFORGE_INSTALL_PRIORITY, and
// runtime.json's installPriority for the runtime).
#define CFRONT_RT_BUDGET_US 10000 // 10 ms: 10-50x the install's CPU time
#ifndef SCHED_RESET_ON_FORK
#define SCHED_RESET_ON_FORK 0x40000000
#endif

struct cfront_rt {
	int on;
	struct rlimit rttime;  // as it was before the window
	struct sigaction xcpu; // as it was before the window
};

static inline void cfront_rt_normal(void) {
	struct sched_param sp = {0};
	// musl's sched_setscheduler is a stub (ENOSYS): the system call is
	// per thread, and the fronts are single-threaded.
	syscall(SYS_sched_setscheduler, 0, SCHED_OTHER, &sp);
}

static inline void cfront_rt_xcpu(int sig) {
	(void)sig;
	cfront_rt_normal(); // async-signal-safe: one system call
}

// The install priorities sforge accepts by name (priority.Names; the
// fronts' tests check): realtime (the default) and normal.
static const char *const cfront_priorities[] = {"realtime", "normal", NULL};

// cfront_rt_begin raises the calling (single) thread to SCHED_FIFO 1 for
// the install window when wanted (the setting is realtime); rt->on says
// whether it did.
static inline void cfront_rt_begin(struct cfront_rt *rt, int wanted) {
	rt->on = 0;
	if (!wanted || getrlimit(RLIMIT_RTTIME, &rt->rttime) != 0)
		return;
	struct rlimit lim = rt->rttime;
	if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur > CFRONT_RT_BUDGET_US)
		lim.rlim_cur = CFRONT_RT_BUDGET_US;
	if (lim.rlim_max != RLIM_INFINITY && lim.rlim_cur > lim.rlim_max)
		lim.rlim_cur = lim.rlim_max;
	struct sigaction sa = {0};
	sa.sa_handler = cfront_rt_xcpu;
	// A system call it lands in goes on (the install's own reads and
	// writes); on the caller's stack or its alternate one (a Go process
	// in the tests).
	sa.sa_flags = SA_RESTART | SA_ONSTACK;
	if (sigaction(SIGXCPU, &sa, &rt->xcpu) != 0)
		return;
	struct sched_param sp = {.sched_priority = 1};
	if (setrlimit(RLIMIT_RTTIME, &lim) != 0 ||
	    syscall(SYS_sched_setscheduler, 0, SCHED_FIFO | SCHED_RESET_ON_FORK, &sp) != 0) {
		setrlimit(RLIMIT_RTTIME, &rt->rttime);
		sigaction(SIGXCPU, &rt->xcpu, NULL);
		return; // no right to it: the window runs as before
	}
	rt->on = 1;
}

// cfront_rt_end puts the thread back to normal scheduling and its limit
// and SIGXCPU as they were.
static inline void cfront_rt_end(struct cfront_rt *rt) {
	if (!rt->on)
		return;
	rt->on = 0;
	cfront_rt_normal();
	setrlimit(RLIMIT_RTTIME, &rt->rttime);
	sigaction(SIGXCPU, &rt->xcpu, NULL);
}

// cfront_kernel_nft mirrors nftables.Supported's version test: a kernel older than
// 5.6 has no concatenated interval sets. A release it cannot read is left
// to Go.
static inline int cfront_kernel_nft(void) {
	struct utsname u;
	if (uname(&u) != 0)
		return 0;
	char *p = u.release, *end;
	long major = strtol(p, &end, 10);
	if (end == p || *end != '.')
		return 0;
	p = end + 1;
	long minor = strtol(p, &end, 10);
	if (end == p)
		return 0;
	return major > 5 || (major == 5 && minor >= 6);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 // Linux 5.14; musl's headers lack it
#endif

// cfront_populate maps the pages of [p, p+n) for writing in one call. A
// front's static state is new to its process, and each page it first
// touches is a page fault, 10-30 µs each on this kind of machine (a
// paravirtualised guest) under load; one madvise maps them all in one
// system call, without an exception per page. Best effort: a kernel
// before 5.14 refuses it, and the pages then fault in one by one as
// before.
static inline void cfront_populate(void *p, size_t n) {
	uintptr_t page = 4096, start = (uintptr_t)p & ~(page - 1), end = ((uintptr_t)p + n + page - 1) & ~(page - 1);
	madvise((void *)start, end - start, MADV_POPULATE_WRITE);
}

// cfront_same_file reports whether a and b are one namespace (device and inode,
// as sharesNetNS compares them): 1 yes, 0 no, -1 when b cannot be read
// for a reason other than permission (sharesNetNS then fails).
static inline int cfront_same_file(const struct stat *a, const char *b) {
	struct stat sb;
	if (stat(b, &sb) != 0)
		return errno == EACCES || errno == EPERM ? 0 : -1;
	return a->st_dev == sb.st_dev && a->st_ino == sb.st_ino;
}

// cfront_host_ns reports whether the namespace ns is one of host's (a
// NULL-terminated list of paths), as sharesNetNS compares them: 1 also for
// one that cannot be read for a reason other than permission; 0 when it is
// none of them (those closed to us cannot be ns).
static inline int cfront_host_ns(const struct stat *ns, const char *const *host) {
	for (; *host; host++)
		if (cfront_same_file(ns, *host) != 0)
			return 1;
	return 0;
}

// cfront_rfc3339 writes the time now as Go's time.RFC3339Nano does, in UTC
// (utc) or in local time (time.Local: the offset, "Z" for none), into out;
// it returns the length (0 when out is too small).
static inline size_t cfront_rfc3339(char *out, size_t cap, int utc) {
	struct timespec now;
	struct tm tm;
	char frac[16] = "", zone[8] = "Z";
	clock_gettime(CLOCK_REALTIME, &now);
	if (utc ? !gmtime_r(&now.tv_sec, &tm) : !localtime_r(&now.tv_sec, &tm))
		return 0;
	if (now.tv_nsec) { // RFC3339Nano drops trailing zeros, and a zero fraction
		snprintf(frac, sizeof frac, ".%09ld", now.tv_nsec);
		for (size_t k = strlen(frac); frac[k - 1] == '0';)
			frac[--k] = '\0';
	}
	long off = utc ? 0 : tm.tm_gmtoff / 60;
	if (off)
		snprintf(zone, sizeof zone, "%c%02ld:%02ld", off < 0 ? '-' : '+', labs(off) / 60, labs(off) % 60);
	char date[32];
	if (!strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm))
		return 0;
	int n = snprintf(out, cap, "%s%s%s", date, frac, zone);
	return n < 0 || (size_t)n >= cap ? 0 : (size_t)n;
}

// cfront_append appends the n bytes at line to the file at path in one
// write, making the file (mode) and its missing directories (dirmode) as
// the Go loggers do (os.OpenFile with O_APPEND|O_CREATE, then
// os.MkdirAll of its directory and once more). A log that cannot be
// written is skipped: failing because of a log would hide the real cause.
static inline void cfront_append(const char *path, const char *line, size_t n, mode_t mode, mode_t dirmode) {
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, mode);
	if (fd < 0) { // a missing directory, or a failure the second try repeats
		char dir[4096];
		size_t d = strlen(path);
		if (d >= sizeof dir)
			return;
		memcpy(dir, path, d + 1);
		char *slash = strrchr(dir, '/');
		if (!slash || slash == dir)
			return;
		*slash = '\0';
		for (char *q = dir + 1; *q; q++)
			if (*q == '/') {
				*q = '\0';
				mkdir(dir, dirmode);
				*q = '/';
			}
		mkdir(dir, dirmode);
		fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, mode);
	}
	if (fd < 0)
		return;
	ssize_t w = write(fd, line, n);
	(void)w;
	close(fd);
}
#endif
