//go:build cgo

package cfronttest

// #cgo CFLAGS: -I${SRCDIR}/.. -Wall -Wextra -Werror
// #include "nft.h"
// #include <linux/filter.h>
// #include <linux/seccomp.h>
// #include <stddef.h>
// #include <stdlib.h>
// #include <sys/prctl.h>
// #include <sys/stat.h>
// #include <sys/syscall.h>
//
// // cfronttest_nft_install_by_child is cfront_nft_install with
// // cf_nft_may_return's answer set to 0, as a thread in a user namespace
// // that does not own its network namespace gets it (a rootless engine's
// // hook): a child opens the socket, and the thread never moves.
// static int cfronttest_nft_install_by_child(int nsfd, const char *table, const struct cfront_allowlist *a) {
// 	int was = cf_nft_may_return_known;
// 	cf_nft_may_return_known = 0;
// 	int r = cfront_nft_install(nsfd, table, a);
// 	cf_nft_may_return_known = was;
// 	return r;
// }
//
// // cfronttest_nft_install_stuck runs cfront_nft_install (by_child:
// // cfronttest_nft_install_by_child) on a thread whose setns is refused
// // (EPERM) for every descriptor but nsfd, by a seccomp filter on this
// // thread alone: once in the namespace it cannot come back, a failure
// // nothing else can induce. -3 when the filter could not be set. The
// // thread must never be used again.
// static int cfronttest_nft_install_stuck(int nsfd, const char *table, const struct cfront_allowlist *a, int by_child) {
// 	struct sock_filter f[] = {
// 	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
// 	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setns, 0, 3),
// 	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])), // the low half (little endian)
// 	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nsfd, 1, 0),
// 	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
// 	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
// 	};
// 	struct sock_fprog prog = {sizeof f / sizeof f[0], f};
// 	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
// 		return -3;
// 	return by_child ? cfronttest_nft_install_by_child(nsfd, table, a) : cfront_nft_install(nsfd, table, a);
// }
//
// // cfronttest_nft_dump sends a GET dump request (family inet; the table,
// // then the attribute a2 with v2, when given) and hands each answer to
// // fn, until NLMSG_DONE. 1 when it ended well; 0 on an error (errno set).
// static int cfronttest_nft_dump(struct cf_nft *s, int msg, const char *table, uint16_t a2, const char *v2, cf_nft_fn fn) {
// 	uint8_t q[512]; // one request: a table name and a set name at most
// 	struct cf_nft_buf b = {q, 0, sizeof q, 0};
// 	size_t m = cf_nft_msg(s, &b, cf_nft_type(msg), CF_NLM_F_REQUEST | CF_NLM_F_DUMP, CF_NFPROTO_INET, 0);
// 	if (table)
// 		cf_nft_str(&b, 1, table); // NFTA_{TABLE_NAME,SET_TABLE,RULE_TABLE,SET_ELEM_LIST_TABLE}
// 	if (v2)
// 		cf_nft_str(&b, a2, v2);
// 	cf_nft_msg_end(&b, m);
// 	uint32_t seq = s->seq;
// 	if (b.bad || !cf_nft_send(s, q, b.len))
// 		return 0;
// 	for (;;) {
// 		size_t len = cf_nft_recv(s);
// 		if (len == 0)
// 			return 0;
// 		size_t at = 0;
// 		struct cf_nft_msgview v;
// 		while (cf_nft_next(s->tx, len, &at, &v)) {
// 			if (v.seq != seq)
// 				continue; // an answer to an earlier request
// 			if (v.type == CF_NLMSG_ERROR || v.type == CF_NLMSG_DONE) {
// 				int err = v.type == CF_NLMSG_DONE && v.len < 4 ? 0 : cf_nft_errno(&v);
// 				errno = err;
// 				return err == 0;
// 			}
// 			fn(s, &v);
// 		}
// 	}
// }
//
// // cfronttest_nft_verify compares the plan for a with what the namespace
// // holds, read back with dumps (the messages the install's echoes are):
// // the C's comparison (cf_nft_verify) on a table the test made or changed.
// // 1: the same; 0: not; -1: no plan, no socket or no answer; -2: the
// // thread is stuck in nsfd.
// static int cfronttest_nft_verify(int nsfd, const char *table, const struct cfront_allowlist *a) {
// 	struct cf_nft *s = calloc(1, sizeof *s);
// 	if (!s)
// 		return -1;
// 	s->table = table;
// 	s->fd = -1;
// 	int ok = -1;
// 	if (cf_nft_plan(s, a)) {
// 		s->fd = cf_nft_socket(nsfd);
// 		if (s->fd == -2)
// 			ok = -2;
// 		else if (s->fd < 0 || !cfronttest_nft_dump(s, CF_NFT_MSG_GETCHAIN, NULL, 0, NULL, cf_nft_on_chain))
// 			ok = -1;
// 		else if (s->got.n_chains != 4)
// 			ok = 0; // not our table, or none: the other dumps would find no table
// 		else if (cfronttest_nft_dump(s, CF_NFT_MSG_GETSET, table, 0, NULL, cf_nft_on_set) &&
// 		         (s->got.n_sets == 0 || cfronttest_nft_dump(s, CF_NFT_MSG_GETSETELEM, table, CF_NFTA_SET_ELEM_LIST_SET,
// 		                                                    CF_NFT_SET_NAME, cf_nft_on_elems)) &&
// 		         cfronttest_nft_dump(s, CF_NFT_MSG_GETRULE, table, 0, NULL, cf_nft_on_rule))
// 			ok = cf_nft_verify(s);
// 	}
// 	if (s->fd >= 0)
// 		close(s->fd);
// 	free(s);
// 	return ok;
// }
//
// // cfronttest_nft_install_other installs the batch for a and compares
// // the kernel's echoes with the plan for b (cfront_nft_apply, the plan
// // swapped after the batch is encoded): what the install returns when the
// // echoes are not the plan (-1: the thread is stuck in nsfd). -3: no
// // plan for a or b.
// static int cfronttest_nft_install_other(int nsfd, const char *table, const struct cfront_allowlist *a,
//                                         const struct cfront_allowlist *b) {
// 	struct cf_nft *s = calloc(1, sizeof *s), *o = calloc(1, sizeof *o);
// 	int r = -3;
// 	if (s && o && cfront_nft_prepare(s, table, a) && cfront_nft_prepare(o, table, b)) {
// 		s->n_rules = o->n_rules;
// 		memcpy(s->rules, o->rules, sizeof s->rules);
// 		s->has_set = o->has_set;
// 		s->n_elems = o->n_elems;
// 		memcpy(s->elems, o->elems, sizeof s->elems);
// 		r = cfront_nft_apply(s, nsfd);
// 	}
// 	free(s);
// 	free(o);
// 	return r;
// }
//
// // cfronttest_nft_delete runs cfront_nft_remove (the deleteTable batch an
// // unverified install also ends with): 1 when acknowledged, with the
// // socket it returns a socket (closed here), -1 when not removed; -2: the
// // thread is stuck in nsfd.
// static int cfronttest_nft_delete(int nsfd, const char *table) {
// 	struct cf_nft *s = calloc(1, sizeof *s);
// 	if (!s)
// 		return -1;
// 	int fd = cfront_nft_remove(s, nsfd, table);
// 	free(s);
// 	if (fd < 0)
// 		return fd;
// 	struct stat st;
// 	int ok = fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
// 	close(fd);
// 	return ok ? 1 : -1;
// }
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/policy"
)

// NFTInstall runs the C install (cfront_nft_install, nft.h) in the network
// namespace at nsPath for the table named table and the allowlist a, which
// it canonicalises first (the C is given what policy.Allowlist.Canonical
// returns, as the front's decoder fills it in). It returns the C's result:
// the number of rules installed, 0 when it left the install to Go. The
// path is opened as it is, without the nsfs check of the Go engine, so that
// tests can give the C a file that is no namespace.
func NFTInstall(nsPath, table string, a policy.Allowlist) (int, error) {
	return nftInstall(nsPath, table, a, false)
}

// NFTInstallStuck runs the C install as NFTInstall does, on a thread of
// its own whose way back to its network namespace is refused (seccomp).
// It returns the C's result with its errno, and whether the thread was
// left in the namespace at nsPath. The thread ends with it.
func NFTInstallStuck(nsPath, table string, a policy.Allowlist) (rules int, errno error, inTarget bool, err error) {
	return onStuckThread(nsPath, table, a, false)
}

// NFTInstallByChild is NFTInstall with the C told that its thread could
// not come back from the namespace: a child opens the socket there.
func NFTInstallByChild(nsPath, table string, a policy.Allowlist) (int, error) {
	return nftInstall(nsPath, table, a, true)
}

// nftInstall is NFTInstall, or with byChild NFTInstallByChild.
func nftInstall(nsPath, table string, a policy.Allowlist, byChild bool) (int, error) {
	ca, err := cAllowlist(a)
	if err != nil {
		return 0, err
	}
	n, err := inC(nsPath, table, func(fd C.int, t *C.char) (C.int, error) {
		if byChild {
			r, err := C.cfronttest_nft_install_by_child(fd, t, ca)
			return r, err
		}
		r, err := C.cfront_nft_install(fd, t, ca) // errno with the result
		return r, err
	})
	return int(n), err
}

// NFTInstallStuckByChild is NFTInstallStuck for NFTInstallByChild's
// install: the thread, told it cannot come back, must never have left.
func NFTInstallStuckByChild(nsPath, table string, a policy.Allowlist) (rules int, errno error, inTarget bool, err error) {
	return onStuckThread(nsPath, table, a, true)
}

func onStuckThread(nsPath, table string, a policy.Allowlist, byChild bool) (rules int, errno error, inTarget bool, err error) {
	ca, err := cAllowlist(a)
	if err != nil {
		return 0, nil, false, err
	}
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, nil, false, fmt.Errorf("failed to open %s: %w", nsPath, err)
	}
	defer unix.Close(fd)
	ctable := C.CString(table)
	defer C.free(unsafe.Pointer(ctable))
	type result struct {
		rules    int
		errno    error
		inTarget bool
		err      error
	}
	done := make(chan result)
	go func() {
		// Locked and never unlocked: the runtime ends the thread, with its
		// filter and its namespace, when this goroutine returns.
		runtime.LockOSThread()
		child := C.int(0)
		if byChild {
			child = 1
		}
		r, errno := C.cfronttest_nft_install_stuck(C.int(fd), ctable, ca, child)
		if r == -3 {
			done <- result{err: fmt.Errorf("seccomp filter: %w", errno)}
			return
		}
		var here, target unix.Stat_t
		err := errors.Join(unix.Stat("/proc/thread-self/ns/net", &here), unix.Fstat(fd, &target))
		done <- result{int(r), errno, here.Dev == target.Dev && here.Ino == target.Ino, err}
	}()
	res := <-done
	return res.rules, res.errno, res.inTarget, res.err
}

// NFTVerify runs the C's comparison (verifyContent's mirror) on the table
// in the namespace at nsPath, read back with dumps: true when the kernel
// holds what the C would install for a. The install compares the kernel's
// echoes of its batch instead: the same messages.
func NFTVerify(nsPath, table string, a policy.Allowlist) (bool, error) {
	ca, err := cAllowlist(a)
	if err != nil {
		return false, err
	}
	n, err := inC(nsPath, table, func(fd C.int, t *C.char) (C.int, error) {
		r, err := C.cfronttest_nft_verify(fd, t, ca)
		return stuckOr(r, err)
	})
	if err == nil && n < 0 {
		err = errors.New("the C could not plan, open a socket or read the table")
	}
	return n == 1, err
}

// NFTInstallOther runs the C install of a's batch in the namespace at
// nsPath, but compares the kernel's echoes with the plan for b: what
// cfront_nft_apply returns when what the kernel committed is not its plan.
func NFTInstallOther(nsPath, table string, a, b policy.Allowlist) (int, error) {
	ca, err := cAllowlist(a)
	if err != nil {
		return 0, err
	}
	cb, err := cAllowlist(b)
	if err != nil {
		return 0, err
	}
	n, err := inC(nsPath, table, func(fd C.int, t *C.char) (C.int, error) {
		r, err := C.cfronttest_nft_install_other(fd, t, ca, cb)
		return r, err
	})
	if err == nil && n == -3 {
		err = errors.New("the C could not plan")
	}
	return int(n), err
}

// stuckOr maps the test helpers' results for inC: -2 (the thread is stuck
// in the namespace) to -1 with its errno, -1 (no plan, no socket or no
// answer: not stuck) to -3.
func stuckOr(r C.int, err error) (C.int, error) {
	switch r {
	case -2:
		return -1, err
	case -1:
		return -3, nil
	}
	return r, nil
}

// NFTDelete runs the C's removal (cfront_nft_remove: the deleteTable batch,
// NEWTABLE and DELTABLE) for table in the namespace at nsPath: nil when
// the kernel acknowledged it and the C returned its socket.
func NFTDelete(nsPath, table string) error {
	n, err := inC(nsPath, table, func(fd C.int, t *C.char) (C.int, error) {
		r, err := C.cfronttest_nft_delete(fd, t)
		return stuckOr(r, err)
	})
	if err == nil && n != 1 {
		err = fmt.Errorf("the C's delete batch failed (%d)", n)
	}
	return err
}

// cAllowlist is the C struct for a's canonical form, as allow.h describes
// it.
func cAllowlist(a policy.Allowlist) (*C.struct_cfront_allowlist, error) {
	c, err := a.Canonical()
	if err != nil {
		return nil, err
	}
	ca := new(C.struct_cfront_allowlist)
	if len(c.Endpoints) > len(ca.endpoints) || len(c.DNS) > len(ca.dns) {
		return nil, fmt.Errorf("allowlist too long for the C: %d endpoints, %d resolvers", len(c.Endpoints), len(c.DNS))
	}
	for i, e := range c.Endpoints {
		a4 := e.Prefix.Addr().As4()
		ce := &ca.endpoints[i]
		for j := range a4 {
			ce.addr[j] = C.uint8_t(a4[j])
		}
		ce.bits = C.uint8_t(e.Prefix.Bits())
		switch e.Proto {
		case policy.TCP:
			ce.proto = 6
		case policy.UDP:
			ce.proto = 17
		default:
			return nil, fmt.Errorf("endpoint %s: unknown protocol", e)
		}
		ce.port = C.uint16_t(e.Port)
	}
	for i, d := range c.DNS {
		a4 := d.As4()
		for j := range a4 {
			ca.dns[i][j] = C.uint8_t(a4[j])
		}
	}
	ca.n_endpoints = C.size_t(len(c.Endpoints))
	ca.n_dns = C.size_t(len(c.DNS))
	if c.Action == policy.Drop {
		ca.drop = 1
	}
	return ca, nil
}

// inC opens nsPath (as it is: no nsfs check, so that tests can hand the C
// a file that is no namespace) and runs fn with it and table on a locked
// thread: the C moves its thread into the namespace and back, and no
// other goroutine may run there meanwhile. fn returns -1 when the thread
// is stuck in the namespace: it then stays locked, and the runtime ends
// it when this goroutine exits.
func inC(nsPath, table string, fn func(fd C.int, table *C.char) (C.int, error)) (C.int, error) {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("failed to open %s: %w", nsPath, err)
	}
	defer unix.Close(fd)
	ctable := C.CString(table)
	defer C.free(unsafe.Pointer(ctable))
	runtime.LockOSThread()
	n, errno := fn(C.int(fd), ctable)
	if n == -1 {
		return n, errors.Join(errors.New("the C could not return to the thread's network namespace"), errno)
	}
	runtime.UnlockOSThread()
	return n, nil
}
