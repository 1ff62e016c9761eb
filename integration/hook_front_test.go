package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/hook"
	"github.com/sforge-dev/netiso/hook/front"
	"github.com/sforge-dev/netiso/internal/testbundle"
)

// TestHookFront runs the built sforge-hook's poststop, its state on a pipe
// as runc gives it, with its C front (hook/front) and without it
// ($SFORGE_HOOK_NO_FRONT): the same exit status and log either way; the
// front must have ended the poststop of a private namespace itself (the Go
// runtime never started: no GODEBUG=inittrace line), and where it leaves
// the poststop to the Go hook, the Go hook must read the whole state the
// front read first (one larger than a pipe's buffer here). The front also
// takes the hook's netlink holder (hook.HoldStage). The lifecycles
// through real runc and podman elsewhere in this package (private
// namespaces, shared ones whose rules poststop removes) run with the front
// as built.
func TestHookFront(t *testing.T) {
	if !front.Built {
		t.Fatal("the test binary was built without cgo: sforge-hook's front is not tested")
	}
	hookBin := testbundle.Build(t).Hook
	const allow = `"annotations":{"sforge.io/egress":"v1;tcp:198.51.100.10:8080"}`
	// A state as large as podman's can be (it copies the annotations).
	padding := `,"annotations":{"x":"` + strings.Repeat("p", 200<<10) + `"}`
	t.Run("netlink holder", func(t *testing.T) {
		for _, withFront := range []bool{true, false} {
			// The hook's stdin ends (it exited): the holder exits.
			cmd := exec.Command(hookBin, hook.HoldStage)
			cmd.Stdin = strings.NewReader("")
			cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
			if !withFront {
				cmd.Env = append(cmd.Env, front.DisableEnv+"=1")
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("%s (front %v): %v, stderr %q", hook.HoldStage, withFront, err, stderr.String())
			}
			if goRan := strings.Contains(stderr.String(), "init "); goRan == withFront {
				t.Fatalf("%s (front %v): the Go hook ran: %v (stderr %q)", hook.HoldStage, withFront, goRan, stderr.String())
			}
		}
	})
	for _, c := range []struct {
		name, spec, stateExtra string
		front                  bool   // the front ends it
		logs                   string // what the Go hook logs ("" for nothing)
	}{
		{"private namespace", `{` + allow + `,"linux":{"namespaces":[{"type":"network"}]}}`, "", true, ""},
		{"namespace path gone", `{` + allow + `,"linux":{"namespaces":[{"type":"network","path":"/nonexistent/netns"}]}}`, padding, true, ""},
		{"malformed config.json", `{` + allow + `,"linux":`, "", false, "poststop container=%s error: failed to decode"},
		{"malformed config.json, large state", `{` + allow + `,"linux":`, padding, false, "poststop container=%s error: failed to decode"},
		{"escaped path", `{` + allow + `,"linux":{"namespaces":[{"type":"network","path":"/nonexistent/\u006eetns"}]}}`, padding, false, ""},
	} {
		for _, withFront := range []bool{true, false} {
			name := c.name + map[bool]string{true: ", front", false: ", no front"}[withFront]
			t.Run(name, func(t *testing.T) {
				bundle := t.TempDir()
				if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(c.spec), 0o644); err != nil {
					t.Fatal(err)
				}
				id := strings.NewReplacer(" ", "-", ",", "").Replace(name)
				log := filepath.Join(t.TempDir(), "hook.log")
				cmd := exec.Command(hookBin, "poststop", "--log", log)
				cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"ociVersion":"1.0.2","id":%q,"status":"stopped","bundle":%q%s}`, id, bundle, c.stateExtra))
				cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
				if !withFront {
					cmd.Env = append(cmd.Env, front.DisableEnv+"=1")
				}
				var stdout, stderr strings.Builder
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil || stdout.Len() != 0 {
					t.Fatalf("poststop: %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
				}
				goRan := strings.Contains(stderr.String(), "init ")
				if want := !(withFront && c.front); goRan != want {
					t.Fatalf("the Go hook ran: %v, want %v (stderr %q)", goRan, want, stderr.String())
				}
				b, err := os.ReadFile(log)
				if c.logs == "" {
					if !os.IsNotExist(err) {
						t.Fatalf("the hook logged %q (%v), want nothing", b, err)
					}
					return
				}
				if want := fmt.Sprintf(c.logs, id); !strings.Contains(string(b), want) {
					t.Fatalf("the hook's log %q (%v) lacks %q", b, err, want)
				}
			})
		}
	}
}
