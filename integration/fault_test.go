package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/internal/testbundle"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/internal/testnet"
	"github.com/sforge-dev/netiso/policy"
)

// Fault injection: each fault ends with the container refused or cleanly
// isolated, never open. (iptables missing is TestHookRuncRefusals'
// "iptables missing" case; a restore that fails halfway is its "restore
// fails" case and TestEngineFailuresLeaveNothing.)

const faultAllow = "v1;tcp:198.51.100.10:8080"

// faultChecks: the judge (allowed) and the internet (forbidden).
var faultChecks = []string{
	"tcp", probeTarget(testnet.JudgeAddr, testnet.AllowedPort),
	"tcp", probeTarget(testnet.InternetAddr, testnet.AllowedPort),
}

// requireRefusedOrIsolated: the container either did not run, or ran
// with the judge reachable and the internet refused.
func requireRefusedOrIsolated(t *testing.T, b *testbundle.Bundle, res testbundle.Result) string {
	t.Helper()
	if !b.Ran() {
		if res.Err == nil {
			t.Fatalf("the process did not run, yet runc succeeded:\n%s", res.Output())
		}
		return "refused"
	}
	got := testbundle.ParseProbe(t, res.Stdout)
	judge := "tcp " + probeTarget(testnet.JudgeAddr, testnet.AllowedPort)
	internet := "tcp " + probeTarget(testnet.InternetAddr, testnet.AllowedPort)
	if got[internet].OK {
		t.Fatalf("OPEN: the container ran and reached the internet:\n%s", res.Output())
	}
	if !got[judge].OK {
		t.Errorf("the container ran without reaching the judge (%s)", got[judge].Error)
	}
	return "isolated"
}

// slowRestoreDir holds an iptables-restore (and ip6tables-restore) that
// stalls: before loading anything ("before"), or after the real one loaded
// the rules ("after"), so that the hook is killed at that point.
func slowRestoreDir(t *testing.T, when string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"iptables-restore", "ip6tables-restore", "iptables-legacy-restore", "ip6tables-legacy-restore", "iptables-nft-restore", "ip6tables-nft-restore"} {
		real, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		script := "#!/bin/sh\nsleep 5\nexec " + real + " \"$@\"\n"
		if when == "after" {
			script = "#!/bin/sh\n" + real + " \"$@\" || exit $?\nsleep 5\n"
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestFaultHookKilled: runc's hook timeout SIGKILLs the hook while it is
// installing (its iptables-restore stalls before or after loading). The
// container must not start; rules loaded before the kill stay in the
// namespace (restrictive, never open) and a later run of the hook in the
// same namespace replaces them cleanly. (runc runs the poststop hooks when
// it destroys the failed container, which removes what was loaded: the
// namespace is observed empty afterwards.)
func TestFaultHookKilled(t *testing.T) {
	requireRunc(t)
	for _, eng := range []string{engines.IPTablesNFT, engines.IPTablesLegacy} {
		for _, when := range []string{"before", "after"} {
			t.Run(eng+"/"+when, func(t *testing.T) {
				tp := testnet.New(t)
				r := testbundle.NewRunc(t)
				env := []string{"PATH=" + slowRestoreDir(t, when) + ":" + os.Getenv("PATH")}
				b := testbundle.New(t, testbundle.Options{
					NetNS: tp.Container.Path(), Annotations: map[string]string{policy.AnnotationKey: faultAllow},
					Checks: faultChecks, Hook: true, HookArgs: hookArgs(eng), HookEnv: env,
					Edit: func(s *specs.Spec) {
						one := 1
						s.Hooks.CreateRuntime[0].Timeout = &one
					},
				})
				id := fmt.Sprintf("killed-%s-%s", eng, when)
				res := r.Run(t, b, id)
				if res.Err == nil || b.Ran() {
					t.Fatalf("the container started although its hook was killed:\n%s", res.Output())
				}
				if !strings.Contains(res.Output(), "timeout") {
					t.Errorf("runc did not report the hook timeout:\n%s", res.Output())
				}
				t.Logf("runc: %s", strings.TrimSpace(res.Stderr))
				// Whatever the kill left, the namespace is not open: a
				// container without an allowlist in it either reaches the
				// internet (nothing was left) or not (the restrictive
				// rules were left); and a fresh isolated run works.
				chains := regChains(t, tp.Container)
				t.Logf("left in the namespace after the kill: %q; hook log:\n%s", chains, b.Log())
				b2 := testbundle.New(t, testbundle.Options{
					NetNS: tp.Container.Path(), Annotations: map[string]string{policy.AnnotationKey: faultAllow},
					Checks: faultChecks, Hook: true, HookArgs: hookArgs(eng),
				})
				res2 := r.Run(t, b2, id+"-again")
				if requireRefusedOrIsolated(t, b2, res2) != "isolated" {
					t.Fatalf("a clean run after the kill was refused:\n%s", res2.Output())
				}
			})
		}
	}
}

// TestFaultLogUnwritable: the hook's log path cannot be opened (it is a
// directory). Logging is best effort, isolation is not: the container
// runs isolated (or is refused), never open.
func TestFaultLogUnwritable(t *testing.T) {
	requireRunc(t)
	tp := testnet.New(t)
	r := testbundle.NewRunc(t)
	for _, eng := range hookEngines {
		t.Run(eng, func(t *testing.T) {
			logDir := t.TempDir()
			b := testbundle.New(t, testbundle.Options{
				NetNS: tp.Container.Path(), Annotations: map[string]string{policy.AnnotationKey: faultAllow},
				Checks: faultChecks, Hook: true, HookArgs: append(hookArgs(eng), "--log", logDir),
			})
			res := r.Run(t, b, "nolog-"+eng)
			t.Logf("outcome: %s", requireRefusedOrIsolated(t, b, res))
			requireNoChains(t, tp.Container)
		})
	}
}

// TestFaultNetNSGoneBeforePoststop: the container's (bind-mounted)
// namespace is deleted after the container stopped and before `runc
// delete` runs poststop. The rules died with the namespace; the hook sees
// the path gone, does nothing and lets the deletion succeed.
func TestFaultNetNSGoneBeforePoststop(t *testing.T) {
	requireRunc(t)
	testenv.RequireBinary(t, "ip")
	name := "sfvgone" + randSuffix()
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	r := testbundle.NewRunc(t)
	for _, eng := range hookEngines {
		t.Run(eng, func(t *testing.T) {
			b := testbundle.New(t, testbundle.Options{
				NetNS: "/run/netns/" + name, Annotations: map[string]string{policy.AnnotationKey: faultAllow},
				Checks: []string{"loopback", "127.0.0.1"}, Hook: true, HookArgs: hookArgs(eng),
			})
			id := "gone-" + eng
			if err := r.Start(t, b, id); err != nil {
				t.Fatal(err)
			}
			r.WaitStopped(t, id)
			if !b.Ran() {
				t.Fatalf("the container did not run:\n%s", r.Output(b, id))
			}
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				t.Fatalf("ip netns del: %v: %s", err, out)
			}
			r.Delete(t, id) // fails the test if poststop broke the deletion
			log := b.Log()
			// The hook skips a namespace path that no longer exists (the
			// rules died with it) without spawning anything or failing.
			if !strings.Contains(log, "install container="+id+" ") || strings.Contains(log, "error") {
				t.Errorf("unexpected hook log:\n%s", log)
			}
			// The next subtest needs the namespace again.
			if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
				t.Fatalf("ip netns add: %v: %s", err, out)
			}
		})
	}
}

// TestFaultDockerdRestart: `docker create` of an isolated container, the
// private dockerd restarted, then `docker start`: the container starts
// isolated (the runtime and the allowlist are part of the container's
// stored config). If the runtime was unregistered across the restart, the
// start fails: refused, never open.
func TestFaultDockerdRestart(t *testing.T) {
	prefix := regBinaries(t)
	regHostGuard(t)
	const image = "sforge-test/fault:1"
	d := regDockerWithSforge(t, prefix, image)
	checks := map[string]bool{"tcp " + regJudgeTCP: true, "tcp " + regInternetTCP: false, "tcp " + regJudgeOther: false}
	create := func(t *testing.T, name string) {
		t.Helper()
		args := append([]string{"create", "--name", name, "--runtime", "sforge", "-e", "SFORGE_EGRESS=" + regAllowlist, image, "/sforge-probe"}, regProbeArgs(checks)...)
		d.MustDocker(t, args...)
	}

	t.Run("runtime still registered: isolated", func(t *testing.T) {
		create(t, "c1")
		d.Restart(t)
		// The probe exits 1 because the forbidden checks fail, as they must.
		out, _ := d.Docker(t.Context(), "start", "-a", "c1")
		regExpect(t, out, checks)
	})
	t.Run("runtime gone after the restart: refused", func(t *testing.T) {
		create(t, "c2")
		if out, err := regSforge(t, prefix, []string{"DOCKER_HOST=" + d.Host}, "uninstall", "--docker", "--docker-config", d.ConfigFile); err != nil {
			t.Fatalf("sforge uninstall: %v\n%s", err, out)
		}
		d.Restart(t)
		out, err := d.Docker(t.Context(), "start", "-a", "c2")
		if err == nil {
			t.Fatalf("the container started without the sforge runtime:\n%s", out)
		}
		if strings.Contains(out, `"ok":true`) {
			t.Fatalf("the probe ran:\n%s", out)
		}
		t.Logf("docker start refused: %s", strings.TrimSpace(out))
	})
}
