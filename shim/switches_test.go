package shim

import (
	"runtime"
	"testing"
	"time"
)

func TestSwitchesSince(t *testing.T) {
	a := threadSwitches{tid: 7, voluntary: 1, involuntary: 2, queued: 10 * time.Microsecond}
	for _, c := range []struct {
		s    threadSwitches
		want string
	}{
		{threadSwitches{tid: 7, voluntary: 1, involuntary: 5, queued: 1510 * time.Microsecond}, "0/3 queued=1.5ms"},
		{threadSwitches{tid: 7, voluntary: 2, involuntary: 2, queued: 10 * time.Microsecond}, "1/0 queued=0s"},
		{threadSwitches{tid: 7, voluntary: 1, involuntary: 2, queued: -1}, "0/0"}, // unreadable: no field
		{threadSwitches{tid: 8}, "moved"},
	} {
		if got := c.s.since(a); got != c.want {
			t.Errorf("%+v since %+v: %q, want %q", c.s, a, got, c.want)
		}
	}
	if got := (threadSwitches{tid: 7, queued: 5}).since(threadSwitches{tid: 7, queued: -1}); got != "0/0" {
		t.Errorf("from an unreadable start: %q, want no queued field", got)
	}
}

func TestRunDelay(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	a := runDelay()
	b := runDelay()
	if a < 0 || b < a {
		t.Fatalf("runDelay read %v then %v on one thread, want two readings that do not go back", a, b)
	}
}
