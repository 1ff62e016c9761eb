//go:build cgo

package cfronttest

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// goRunDelay reads the calling thread's run-queue wait as the Go shim does
// (shim.runDelay), to compare the C with.
func goRunDelay() (time.Duration, error) {
	b, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return 0, fmt.Errorf("/proc/thread-self/schedstat: %q, want three fields", b)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	return time.Duration(ns), err
}

// TestRunDelay makes the thread wait for a CPU (a busy thread pinned to
// the same CPU) and checks that cfront_run_delay counts the wait, and
// agrees with the kernel's file as Go reads it.
func TestRunDelay(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	cpu := -1
	for i := 0; i < 1024 && cpu < 0; i++ {
		if set.IsSet(i) {
			cpu = i
		}
	}
	if cpu < 0 {
		t.Fatal("no CPU in this process's affinity mask")
	}
	pin := func() error {
		var one unix.CPUSet
		one.Set(cpu)
		return unix.SchedSetaffinity(0, &one)
	}
	// Both goroutines stay locked to their threads when they end, so Go
	// discards the pinned threads instead of reusing them.
	var stop atomic.Bool
	busy := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := pin(); err != nil {
			busy <- err
			return
		}
		busy <- nil
		for deadline := time.Now().Add(2 * time.Second); !stop.Load() && time.Now().Before(deadline); {
		}
	}()
	defer stop.Store(true)
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	type result struct {
		before, c0, c1, after time.Duration
		ok0, ok1              bool
		err                   error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var r result
		if r.err = pin(); r.err != nil {
			done <- r
			return
		}
		if r.before, r.err = goRunDelay(); r.err != nil {
			done <- r
			return
		}
		r.c0, r.ok0 = RunDelay()
		// Spin beside the busy thread until the C reading has grown:
		// the scheduler shares the CPU between the two within a few
		// slices (0.7 ms each); bounded at a second.
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
			if r.c1, r.ok1 = RunDelay(); !r.ok1 || r.c1 > r.c0 {
				break
			}
		}
		r.after, r.err = goRunDelay()
		done <- r
	}()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.ok0 || !r.ok1 {
		t.Fatalf("cfront_run_delay could not read the thread's schedstat (%v, %v)", r.ok0, r.ok1)
	}
	if r.c1 <= r.c0 {
		t.Fatalf("cfront_run_delay stayed at %v while the thread shared its CPU for a second", r.c0)
	}
	if r.c0 < r.before || r.c1 > r.after {
		t.Fatalf("cfront_run_delay read %v then %v, outside what Go read around them (%v, %v)", r.c0, r.c1, r.before, r.after)
	}
	t.Logf("waited for a CPU %v beside a busy thread", r.c1-r.c0)
}

func TestQueued(t *testing.T) {
	for _, c := range []struct {
		before, after int64
		cap           int
		want          string
	}{
		{1000, 1_500_000, 48, " queued=1.499ms"},
		{0, 0, 48, " queued=0s"},
		{7, 27_000, 48, " queued=27µs"},
		{-1, 5, 48, ""},        // the first reading failed
		{5, -1, 48, ""},        // the second
		{5, 4, 48, ""},         // not a wait
		{0, 5_000_000, 16, ""}, // no room for the field and a duration
	} {
		if got := Queued(c.before, c.after, c.cap); got != c.want {
			t.Errorf("cfront_queued(%d, %d) in %d bytes: %q, want %q", c.before, c.after, c.cap, got, c.want)
		}
	}
}
