package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sforge-dev/netiso/internal/testbin"
	"github.com/sforge-dev/netiso/shim"
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	defer testbin.Cleanup()
	// sforge-runtime started by the tests' dockerd and containerd (which
	// inherit this environment) logs under a directory of the run's own,
	// not the host's /var/log/sforge. Tests that need other settings set
	// SFORGE_RUNTIME_CONFIG themselves.
	if os.Getenv(shim.ConfigEnv) == "" {
		dir, err := os.MkdirTemp("", "sforge-integration-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
		cfg, err := json.Marshal(shim.Config{Log: filepath.Join(dir, "runtime.log")})
		if err != nil {
			return 0, err
		}
		config := filepath.Join(dir, "runtime.json")
		if err := os.WriteFile(config, cfg, 0o644); err != nil {
			return 0, err
		}
		if err := os.Setenv(shim.ConfigEnv, config); err != nil {
			return 0, err
		}
	}
	return m.Run(), nil
}
