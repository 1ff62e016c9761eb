// control-runtime: the 32-at-once benchmark's control
// (BenchmarkConcurrentStarts, "controls"). It is sforge-runtime's C front
// with the install taken out: for `create` it runs runc create as a child,
// as the front does, then opens the created container's network namespace
// and, where the front would install its rules, burns
// $SFORGE_BENCH_SPIN_NS of CPU time and nothing else, timed as the front
// times its install (wall, CPU, context switches, run-queue wait), and
// logs it in the front's words to $SFORGE_BENCH_CONTROL_LOG. Every other
// command is exec'd to $SFORGE_BENCH_RUNC.
//
// So a burst of creates through it shows what a window of that CPU time
// at that point of a start experiences from the host's scheduler alone:
// whatever tail it has, no install, lock or engine put there.
//
// Built by the benchmark with musl-gcc -static, as the fronts are; it
// shares their helpers (internal/cfront/cfront.h).
#include "cfront.h"

#include <sys/resource.h>
#include <sys/wait.h>

static long long since(const struct timespec *t0, clockid_t clock) {
	struct timespec t;
	clock_gettime(clock, &t);
	return (t.tv_sec - t0->tv_sec) * 1000000000LL + (t.tv_nsec - t0->tv_nsec);
}

static void fail(const char *what) {
	fprintf(stderr, "control-runtime: %s: %s\n", what, strerror(errno));
	_exit(125);
}

int main(int argc, char **argv) {
	const char *runc = getenv("SFORGE_BENCH_RUNC"), *log = getenv("SFORGE_BENCH_CONTROL_LOG");
	const char *spin = getenv("SFORGE_BENCH_SPIN_NS");
	if (!runc || !log || !spin) {
		fprintf(stderr, "control-runtime: SFORGE_BENCH_RUNC, SFORGE_BENCH_CONTROL_LOG and SFORGE_BENCH_SPIN_NS must be set\n");
		return 125;
	}
	char *end;
	long long spin_ns = strtoll(spin, &end, 10);
	if (*end || spin_ns < 0) {
		fprintf(stderr, "control-runtime: SFORGE_BENCH_SPIN_NS=%s: want nanoseconds\n", spin);
		return 125;
	}
	// runc's global options, then the command: the benchmark's Runtime
	// passes `--root R --log L --log-format json create --bundle B
	// --pid-file P ID`.
	const char *pid_file = NULL;
	int create = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "create") == 0)
			create = 1;
		else if (create && strcmp(argv[i], "--pid-file") == 0 && i + 1 < argc)
			pid_file = argv[i + 1];
	}
	argv[0] = (char *)runc;
	if (!create || !pid_file) {
		execv(runc, argv);
		fail("exec runc");
	}
	pid_t child = fork();
	if (child < 0)
		fail("fork");
	if (child == 0) {
		execv(runc, argv);
		fail("exec runc");
	}
	int status;
	if (waitpid(child, &status, 0) != child)
		fail("wait for runc");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return WIFEXITED(status) ? WEXITSTATUS(status) : 1;

	// The front's window (shim/front/create.c), the install replaced by
	// CPU time burnt in system calls, as most of an install's is.
	int sched = cfront_schedstat_open();
	struct timespec t0, c0, c;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
	struct rusage r0, r1;
	getrusage(RUSAGE_THREAD, &r0);
	long long queued0 = cfront_run_delay(sched);
	char buf[32] = {0};
	int fd = open(pid_file, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || read(fd, buf, sizeof buf - 1) <= 0)
		fail("read the pid file");
	close(fd);
	char path[64];
	snprintf(path, sizeof path, "/proc/%ld/ns/net", strtol(buf, NULL, 10));
	int netns = open(path, O_RDONLY | O_CLOEXEC);
	if (netns < 0)
		fail("open the container's network namespace");
	do
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c); // a system call: CPU clocks have no vDSO
	while (since(&c0, CLOCK_PROCESS_CPUTIME_ID) < spin_ns);
	close(netns);
	long long queued1 = cfront_run_delay(sched);
	long long wall_ns = since(&t0, CLOCK_MONOTONIC), cpu_ns = since(&c0, CLOCK_PROCESS_CPUTIME_ID);
	getrusage(RUSAGE_THREAD, &r1);

	char wall[32], cpu[32], spun[32], queued[48], line[512];
	cfront_duration(wall, sizeof wall, wall_ns);
	cfront_duration(cpu, sizeof cpu, cpu_ns);
	cfront_duration(spun, sizeof spun, spin_ns);
	cfront_queued(queued, sizeof queued, queued0, queued1);
	int n = snprintf(line, sizeof line, "container %s: control window (spin=%s install=%s install-cpu=%s total=%s switches=%ld/%ld%s front=c)\n",
	                 argv[argc - 1], spun, wall, cpu, wall, r1.ru_nvcsw - r0.ru_nvcsw, r1.ru_nivcsw - r0.ru_nivcsw, queued);
	cfront_append(log, line, (size_t)n, 0644, 0755);
	return 0;
}
