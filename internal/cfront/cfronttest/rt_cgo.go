//go:build cgo

package cfronttest

// #cgo CFLAGS: -I${SRCDIR}/.. -Wall -Wextra -Werror
// #include "cfront.h"
//
// #include <linux/capability.h>
//
// struct cfronttest_rt {
// 	int on;             // cfront_rt_begin raised the thread
// 	int policy_in;      // sched_getscheduler in the window
// 	long long rttime;   // RLIMIT_RTTIME's soft limit in the window
// 	int policy_spun;    // after the spin, still in the window
// 	int policy_out;     // after cfront_rt_end
// 	int restored;       // the limit and SIGXCPU's action as they were
// };
//
// // cfronttest_nice drops (drop 1) or gives back (drop 0) CAP_SYS_NICE in
// // the calling thread's effective set: capabilities are per thread.
// static int cfronttest_nice(int drop) {
// 	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
// 	struct __user_cap_data_struct d[2];
// 	if (syscall(SYS_capget, &h, d) != 0)
// 		return -1;
// 	if (drop)
// 		d[0].effective &= ~(1u << CAP_SYS_NICE);
// 	else
// 		d[0].effective |= d[0].permitted & (1u << CAP_SYS_NICE);
// 	return (int)syscall(SYS_capset, &h, d);
// }
//
// // cfronttest_rt runs a window as the fronts do, on the calling thread,
// // spinning spin_ns of wall time inside it without a system call that
// // blocks; without_nice runs it without CAP_SYS_NICE.
// static int cfronttest_rt(int wanted, long long spin_ns, int without_nice, struct cfronttest_rt *r) {
// 	struct rlimit before, in, after;
// 	struct sigaction xcpu_before, xcpu_after;
// 	if (getrlimit(RLIMIT_RTTIME, &before) != 0 || sigaction(SIGXCPU, NULL, &xcpu_before) != 0)
// 		return -1;
// 	if (without_nice && cfronttest_nice(1) != 0)
// 		return -1;
// 	struct cfront_rt rt;
// 	cfront_rt_begin(&rt, wanted);
// 	r->on = rt.on;
// 	r->policy_in = (int)syscall(SYS_sched_getscheduler, 0);
// 	getrlimit(RLIMIT_RTTIME, &in);
// 	r->rttime = in.rlim_cur == RLIM_INFINITY ? -1 : (long long)in.rlim_cur;
// 	struct timespec t0, t;
// 	clock_gettime(CLOCK_MONOTONIC, &t0);
// 	for (volatile unsigned long x = 0;; x++) {
// 		clock_gettime(CLOCK_MONOTONIC, &t); // the vDSO: no system call
// 		if ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) >= spin_ns)
// 			break;
// 	}
// 	r->policy_spun = (int)syscall(SYS_sched_getscheduler, 0);
// 	cfront_rt_end(&rt);
// 	r->policy_out = (int)syscall(SYS_sched_getscheduler, 0);
// 	if (without_nice)
// 		cfronttest_nice(0);
// 	getrlimit(RLIMIT_RTTIME, &after);
// 	sigaction(SIGXCPU, NULL, &xcpu_after);
// 	r->restored = after.rlim_cur == before.rlim_cur && after.rlim_max == before.rlim_max &&
// 	              xcpu_after.sa_handler == xcpu_before.sa_handler && xcpu_after.sa_flags == xcpu_before.sa_flags;
// 	return 0;
// }
import "C"

import (
	"errors"
	"time"
)

// RTWindow is what a real-time install window looked like from inside.
type RTWindow struct {
	On         bool          // cfront_rt_begin raised the thread
	PolicyIn   int           // sched_getscheduler in the window (SCHED_RESET_ON_FORK or'ed in)
	RTTime     time.Duration // RLIMIT_RTTIME's soft limit in the window (-1: none)
	PolicySpun int           // after the spin, before cfront_rt_end
	PolicyOut  int           // after cfront_rt_end
	Restored   bool          // RLIMIT_RTTIME and SIGXCPU's action as before
}

// RT runs cfront_rt_begin (wanted: the setting is realtime), a spin of
// spin wall time without a blocking system call, and cfront_rt_end, all
// on one thread in one C call; withoutNice first drops CAP_SYS_NICE from
// that thread's effective set (and gives it back after).
func RT(wanted bool, spin time.Duration, withoutNice bool) (RTWindow, error) {
	var r C.struct_cfronttest_rt
	if C.cfronttest_rt(cbool(wanted), C.longlong(spin), cbool(withoutNice), &r) != 0 {
		return RTWindow{}, errors.New("cfronttest: cannot read or set the thread's limits, signal action or capabilities")
	}
	rt := time.Duration(r.rttime) * time.Microsecond
	if r.rttime < 0 {
		rt = -1
	}
	return RTWindow{On: r.on != 0, PolicyIn: int(r.policy_in), RTTime: rt, PolicySpun: int(r.policy_spun),
		PolicyOut: int(r.policy_out), Restored: r.restored != 0}, nil
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// RTBudget is the fronts' CFRONT_RT_BUDGET_US.
const RTBudget = C.CFRONT_RT_BUDGET_US * time.Microsecond
