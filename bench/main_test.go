package bench

import (
	"fmt"
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
	if grown := logs.Grown(); len(grown) > 0 {
		for _, g := range grown {
			fmt.Fprintln(os.Stderr, "bench: FAIL: the run wrote to the host's logs:", g)
		}
		code = 1
	}
	os.Exit(code)
}
