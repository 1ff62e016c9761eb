// deny-setns FD PROGRAM [ARG...] runs PROGRAM with a seccomp filter that
// fails setns(FD, ...) with EPERM, and lets every other call through: how
// the tests make a C front's way back to its own network namespace fail
// (the descriptor it opened for that is the lowest free one, the target's
// namespace one above it), a failure nothing else can induce. The filter
// is inherited by what PROGRAM starts (runc: it calls no setns for a
// container with namespaces of its own).
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "deny-setns: unknown architecture"
#endif

int main(int argc, char **argv) {
	char *end;
	long fd = argc >= 3 ? strtol(argv[1], &end, 10) : -1;
	if (argc < 3 || *end || fd < 0 || fd > 1 << 20) {
		fprintf(stderr, "usage: deny-setns FD PROGRAM [ARG...]\n");
		return 2;
	}
	struct sock_filter f[] = {
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setns, 0, 3),
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])), // the low half (little endian)
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)fd, 0, 1),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {sizeof f / sizeof f[0], f};
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
		perror("deny-setns: seccomp");
		return 2;
	}
	execv(argv[2], argv + 2);
	perror("deny-setns: exec");
	return 127;
}
