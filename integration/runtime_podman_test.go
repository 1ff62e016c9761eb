package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sforge-dev/netiso/internal/testpodman"
	"github.com/sforge-dev/netiso/policy"
	"github.com/sforge-dev/netiso/shim"
)

// TestRuntimePodman is the podman acceptance: `sforge install --podman`
// writes the hooks.d files, and `podman run --annotation
// sforge.io/egress=...` (with NET_RAW dropped: hooks.d cannot change the
// spec, so the hook refuses NET_RAW instead) is isolated like the Docker
// case, in a user namespace (--uidmap) too; without the annotation the
// same image reaches everything; a malformed annotation, NET_RAW kept,
// NET_ADMIN, --privileged and --network host each fail `podman run`
// before the process runs. sforge-runtime given as podman's runtime
// isolates too (and drops the NET_RAW podman grants).
func TestRuntimePodman(t *testing.T) {
	prefix := regBinaries(t)
	regHostGuard(t)
	hooks := filepath.Join(t.TempDir(), "hooks.d")
	// The hook's log in the test's directory, not the host's /var/log
	// (podman gives hooks no environment: the hooks.d files carry --log).
	hookLog := filepath.Join(t.TempDir(), "hook.log")
	out, err := regSforge(t, prefix, nil, "install", "--podman", "--hooks-dir", hooks, "--prefix", prefix, "--hook-log", hookLog)
	if err != nil {
		t.Fatalf("sforge install --podman: %v\n%s", err, out)
	}
	for _, f := range []string{"sforge-createruntime.json", "sforge-poststop.json"} {
		if _, err := os.Stat(filepath.Join(hooks, f)); err != nil {
			t.Fatalf("hooks.d file missing: %v\n%s", err, out)
		}
	}
	p := testpodman.New(t, testpodman.Options{HooksDir: hooks})
	regWorld(t, p.NetNS)
	const image = "localhost/sforge-test/probe:1"
	p.ImportImage(t, image, regRootfs(t, prefix))
	p.MustPodman(t, "run", "-d", "--name", "nb", image, "/bin/httpd", "-f", "-p", "9000", "-h", "/")
	nb4 := strings.TrimSpace(p.MustPodman(t, "inspect", "-f", "{{.NetworkSettings.IPAddress}}", "nb"))
	nb6 := strings.TrimSpace(p.MustPodman(t, "inspect", "-f", "{{.NetworkSettings.GlobalIPv6Address}}", "nb"))
	if nb4 == "" || nb6 == "" {
		t.Fatalf("neighbour addresses %q %q", nb4, nb6)
	}
	checks, open := regRuntimeChecks(nb4, nb6)
	script := "/sforge-probe " + strings.Join(regProbeArgs(checks), " ") + "; grep -E '^Cap(Eff|Bnd)' /proc/self/status"
	annotation := policy.AnnotationAssignment(regAllowlist)

	t.Run("isolated", func(t *testing.T) {
		out := p.MustPodman(t, "run", "--rm", "--annotation", annotation, "--cap-drop", "NET_RAW", image, "/bin/sh", "-c", script)
		regExpect(t, out, checks)
		if capBit(t, out, "CapBnd", capNetRaw) {
			t.Errorf("NET_RAW held:\n%s", out)
		}
		b, err := os.ReadFile(hookLog)
		if err != nil || !strings.Contains(string(b), "install container=") {
			t.Errorf("no install line in the --hook-log file %s (%v):\n%s", hookLog, err, b)
		}
	})
	// The poststop hook records what the rules refused, in audit.jsonl
	// beside its --log.
	t.Run("audit", func(t *testing.T) {
		name := "audit-" + randSuffix()
		p.MustPodman(t, append([]string{"run", "-d", "--name", name, "--annotation", policy.AnnotationAssignment(auditAllowlist), "--dns", "127.0.0.53", "--cap-drop", "NET_RAW", image, "/sforge-probe", "--timeout", "1s"}, auditProbe...)...)
		t.Cleanup(func() { _, _ = p.Podman(context.Background(), "rm", "-f", name) })
		id := strings.TrimSpace(p.MustPodman(t, "inspect", "-f", "{{.Id}}", name))
		p.MustPodman(t, "wait", name)
		t.Logf("probe:\n%s", p.MustPodman(t, "logs", name))
		p.MustPodman(t, "rm", name)
		b, _ := os.ReadFile(hookLog)
		t.Logf("hook log:\n%s", tail(string(b), 12))
		checkAudit(t, auditRecord(t, filepath.Join(filepath.Dir(hookLog), "audit.jsonl"), id), auditAllowlist)
	})
	t.Run("user namespace", func(t *testing.T) {
		// --uidmap: the container, and its network namespace, in a user
		// namespace of their own (root is uid 100000 on the host). The
		// hook enters that namespace from the host's user namespace.
		installs := func() int {
			b, _ := os.ReadFile(hookLog)
			return strings.Count(string(b), " install container=")
		}
		before := installs()
		out := p.MustPodman(t, "run", "--rm", "--uidmap", "0:100000:65536", "--gidmap", "0:100000:65536",
			"--annotation", annotation, "--cap-drop", "NET_RAW", image, "/bin/sh", "-c", script+"; cat /proc/self/uid_map")
		regExpect(t, out, checks)
		if !strings.Contains(out, "100000") {
			t.Errorf("the container ran without its user namespace:\n%s", out)
		}
		if n := installs() - before; n != 1 {
			t.Errorf("%d installs for one container, want 1", n)
		}
	})
	t.Run("without annotation", func(t *testing.T) {
		out := p.MustPodman(t, "run", "--rm", image, "/bin/sh", "-c", script)
		regExpect(t, out, open)
	})
	t.Run("sforge-runtime as podman's runtime", func(t *testing.T) {
		// podman --runtime (or a runtime in containers.conf) instead of
		// hooks.d, as under Docker. The allowlist in the environment, so that no hooks.d
		// hook is added; podman gives the runtime no environment of the
		// test's, so a wrapper passes the run's settings (its log).
		config := os.Getenv(shim.ConfigEnv)
		wrapper := filepath.Join(t.TempDir(), "sforge-runtime")
		runtimeWrapper(t, wrapper, filepath.Join(prefix, "bin", "sforge-runtime"), shim.ConfigEnv+"="+config)
		before := strings.Count(shimLogOf(t, config), dropped)
		out := p.MustPodman(t, "run", "--rm", "--runtime", wrapper, "-e", policy.EnvVar+"="+regAllowlist, image, "/bin/sh", "-c", script)
		regExpect(t, out, checks)
		if capBit(t, out, "CapBnd", capNetRaw) {
			t.Errorf("NET_RAW held (podman grants it; the runtime must drop it):\n%s", out)
		}
		if n := strings.Count(shimLogOf(t, config), dropped) - before; n != 1 {
			t.Errorf("%d isolated creates for one container, want 1:\n%s", n, shimLogOf(t, config))
		}
		out = p.MustPodman(t, "run", "--rm", "--runtime", wrapper, image, "/bin/sh", "-c", script)
		regExpect(t, out, open)
	})
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"malformed annotation", "invalid sforge.io/egress value", []string{"--annotation", policy.AnnotationAssignment("v1;tcp:nope"), "--cap-drop", "NET_RAW"}},
		{"NET_RAW kept", "CAP_NET_RAW", []string{"--annotation", annotation}},
		{"NET_ADMIN", "CAP_NET_ADMIN", []string{"--annotation", annotation, "--cap-drop", "NET_RAW", "--cap-add", "NET_ADMIN"}},
		{"privileged", "CAP_SYS_ADMIN", []string{"--annotation", annotation, "--privileged"}},
		{"host network", "has no network namespace", []string{"--annotation", annotation, "--cap-drop", "NET_RAW", "--network", "host"}},
	} {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			markers := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := append([]string{"run", "--rm", "-v", markers + ":/m"}, tc.args...)
			args = append(args, image, "/bin/touch", "/m/ran")
			out, err := p.Podman(ctx, args...)
			if err == nil {
				t.Fatalf("podman run succeeded; it must fail:\n%s", out)
			}
			if !strings.Contains(out, "sforge-hook") || !strings.Contains(out, tc.want) {
				t.Errorf("podman run failed without our message (%q):\n%s", tc.want, out)
			}
			regMustNotExist(t, filepath.Join(markers, "ran"), tc.name)
			t.Logf("podman run refused as expected:\n%s", out)
		})
	}

	if out, err := regSforge(t, prefix, nil, "uninstall", "--podman", "--hooks-dir", hooks); err != nil {
		t.Fatalf("sforge uninstall --podman: %v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(hooks); len(entries) != 0 {
		t.Fatalf("uninstall left %v", entries)
	}
}
