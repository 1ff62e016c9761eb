package testbundle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Binaries are the static binaries bundles use, built from this module.
type Binaries struct {
	Probe string // cmd/sforge-probe
	Hook  string // cmd/sforge-hook
}

var (
	buildOnce sync.Once
	built     Binaries
	buildErr  error
)

// Build compiles the probe and the hook once per test binary, the way
// `make build` does (static, stripped), into a directory keyed by the
// module's location: test binaries of several packages, and worktrees of
// several developers, may build at the same time without clobbering each
// other's files (each build lands under a temporary name, then is renamed).
func Build(t testing.TB) Binaries {
	t.Helper()
	buildOnce.Do(func() { built, buildErr = build() })
	if buildErr != nil {
		t.Fatalf("failed to build the test binaries: %v", buildErr)
	}
	return built
}

func build() (Binaries, error) {
	root, err := moduleRoot()
	if err != nil {
		return Binaries{}, err
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("sforge-testbin-%d-%s", os.Getuid(), hex.EncodeToString(sum[:6])))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	b := Binaries{Probe: filepath.Join(dir, "sforge-probe"), Hook: filepath.Join(dir, "sforge-hook")}
	for out, pkg := range map[string]string{b.Probe: "./cmd/sforge-probe", b.Hook: "./cmd/sforge-hook"} {
		tmp := fmt.Sprintf("%s.%d.tmp", out, os.Getpid())
		cmd := exec.Command(gobin, "build", "-trimpath", "-ldflags", "-s -w", "-o", tmp, pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return Binaries{}, fmt.Errorf("go build %s: %v: %s", pkg, err, out)
		}
		if err := os.Rename(tmp, out); err != nil {
			return Binaries{}, err
		}
	}
	return b, nil
}

// moduleRoot finds the directory holding go.mod above the working
// directory (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
