//go:build cgo

package cfronttest

import (
	"runtime"
	"testing"
)

// TestPopulate: pages cfront_populate mapped take no page fault when the
// front first writes to them, those it did not take one each. The hook's
// front populates its static state so that its install does not fault.
func TestPopulate(t *testing.T) {
	runtime.LockOSThread() // the C counts the calling thread's faults
	defer runtime.UnlockOSThread()
	const pages = 32
	if got := TouchFaults(pages, false); got < pages {
		t.Fatalf("%d faults writing to %d fresh pages, want at least one each: the count is not what the test assumes", got, pages)
	}
	if got := TouchFaults(pages, true); got != 0 {
		t.Fatalf("%d faults writing to %d populated pages, want none", got, pages)
	}
}
