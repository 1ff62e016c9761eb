// Package testenv decides whether a test that needs the real system (root,
// a binary, a daemon) may run, and makes the decision loud: outside CI such
// a test skips with the reason; in CI (CI=true) a missing requirement is a
// failure, so a skipped test is never counted as a pass there.
package testenv

import (
	"os"
	"os/exec"
	"sync"
	"testing"
)

// InCI reports whether the tests run under .ci/run (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Require stops the test when ok is false: a failure in CI, a loud skip
// elsewhere.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if InCI() {
		t.Fatalf("REQUIREMENT MISSING IN CI: %s", reason)
	}
	t.Skipf("SKIPPED (not in CI): %s", reason)
}

// RequireRoot requires uid 0.
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root (run `sudo make test`)")
}

// RequireBinary requires an executable on PATH and returns its path.
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	Require(t, err == nil, name+" not found on PATH (`make deps` installs it)")
	return p
}

// AtOnce runs f for 0..n-1 concurrently, released together, and returns
// each one's error.
func AtOnce(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			errs[i] = f(i)
		}()
	}
	close(gate)
	wg.Wait()
	return errs
}
