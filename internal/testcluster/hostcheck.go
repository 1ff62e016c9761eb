package testcluster

import (
	"testing"
	"time"
)

// LeftoversLocked is Leftovers under the machine's cluster lock, taken
// when the cluster id is torn down: another test package's cluster, which
// would be rewriting the same host sysctls, cannot run during the check.
// Compare with the cluster's HostBefore, taken under the same lock.
func LeftoversLocked(t testing.TB, id string, before HostState) []string {
	t.Helper()
	lock := lockHost(t, 20*time.Minute)
	defer lock.Close()
	return Leftovers(id, before)
}
