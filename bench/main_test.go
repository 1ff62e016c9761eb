package bench

import (
	"os"
	"testing"

	"github.com/sforge-dev/netiso/internal/testenv"
)

// TestMain fails a run that wrote to the host's sforge logs: every
// benchmark gives the binaries it starts logs of its own (the hooks'
// --log, the shim's settings file and SFORGE_HOOK_LOG).
func TestMain(m *testing.M) {
	logs := testenv.SnapshotLogs(testenv.HostLogDir)
	code := m.Run()
	if !logs.Clean(os.Stderr, "bench") {
		code = 1
	}
	os.Exit(code)
}
