//go:build cgo

package cfronttest

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/internal/testenv"
)

const resetOnFork = 0x40000000 // SCHED_RESET_ON_FORK, or'ed into sched_getscheduler's answer

// TestRTWindow: the install window at SCHED_FIFO 1, reset on fork, with
// the budget as RLIMIT_RTTIME, and everything as it was after it.
func TestRTWindow(t *testing.T) {
	testenv.RequireRoot(t)
	w, err := RT(true, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if !w.On || w.PolicyIn != unix.SCHED_FIFO|resetOnFork || w.RTTime != RTBudget {
		t.Errorf("in the window: %+v; want SCHED_FIFO with SCHED_RESET_ON_FORK, RLIMIT_RTTIME %v", w, RTBudget)
	}
	if w.PolicyOut != unix.SCHED_NORMAL || !w.Restored {
		t.Errorf("after the window: %+v; want SCHED_OTHER, the limit and SIGXCPU as before", w)
	}
}

// TestRTWindowOff: the setting "normal", and a process without the right
// to real-time scheduling (a rootless engine's), run the window as any
// other, and leave nothing changed.
func TestRTWindowOff(t *testing.T) {
	cases := map[string]struct{ wanted, withoutNice bool }{"normal": {false, false}}
	if unix.Geteuid() == 0 {
		cases["without CAP_SYS_NICE"] = struct{ wanted, withoutNice bool }{true, true}
	}
	for name, c := range cases {
		w, err := RT(c.wanted, 0, c.withoutNice)
		if err != nil {
			t.Fatal(err)
		}
		if w.On || w.PolicyIn != unix.SCHED_NORMAL || w.PolicyOut != unix.SCHED_NORMAL || !w.Restored {
			t.Errorf("%s: %+v; want SCHED_OTHER throughout, nothing changed", name, w)
		}
	}
}

// TestRTWindowBudget: a window that runs on past the budget without
// blocking (a fault of ours) is put back to normal scheduling by the
// kernel's SIGXCPU, and goes on.
func TestRTWindowBudget(t *testing.T) {
	testenv.RequireRoot(t)
	// Ten times the budget in wall time: at real-time priority the spin
	// has a CPU, so its CPU time passes the budget well before.
	w, err := RT(true, 10*RTBudget, false)
	if err != nil {
		t.Fatal(err)
	}
	if !w.On || w.PolicyIn != unix.SCHED_FIFO|resetOnFork {
		t.Fatalf("in the window: %+v", w)
	}
	if w.PolicySpun != unix.SCHED_NORMAL || w.PolicyOut != unix.SCHED_NORMAL || !w.Restored {
		t.Errorf("after %v of spinning: %+v; want SCHED_OTHER (demoted by SIGXCPU), the limit and SIGXCPU as before", 10*RTBudget, w)
	}
}

// BenchmarkRTWindow: what the real-time window adds to an install (its
// system calls: limit, signal action, policy, and back), against the
// same call with the setting normal.
func BenchmarkRTWindow(b *testing.B) {
	testenv.RequireRoot(b)
	for _, wanted := range []bool{false, true} {
		b.Run(map[bool]string{false: "normal", true: "realtime"}[wanted], func(b *testing.B) {
			for b.Loop() {
				if w, err := RT(wanted, 0, false); err != nil || w.On != wanted {
					b.Fatalf("%+v %v", w, err)
				}
			}
		})
	}
}
