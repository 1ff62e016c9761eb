package integration

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/sforge-dev/netiso/internal/fakeapi"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/launcher"
)

// claudeCodePackage is the Claude Code release hack/agents/install.sh
// installs, which the claude-code profile was checked against.
const claudeCodePackage = "@anthropic-ai/claude-code@2.1.197"

// agentInstall returns the directory of an npm package that
// hack/agents/install.sh (make agents) installed.
func agentInstall(t *testing.T, pkg string) string {
	t.Helper()
	dir := filepath.Join(cmp.Or(os.Getenv("SFORGE_AGENTS_CACHE"), "/var/cache/sforge/agents"), strings.ReplaceAll(pkg, "/", "_"))
	_, err := os.Stat(filepath.Join(dir, ".done"))
	testenv.Require(t, err == nil, pkg+" is not installed in "+dir+": run `make agents` (hack/agents/install.sh)")
	return dir
}

// copyWithLibs copies the host's executable src to dst in rootfs, with the
// shared libraries ldd names.
func copyWithLibs(t *testing.T, rootfs, src, dst string) {
	t.Helper()
	copyFile(t, src, filepath.Join(rootfs, dst))
	out, err := exec.Command("ldd", src).Output()
	if err != nil {
		t.Fatalf("ldd %s: %v", src, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		for _, f := range strings.Fields(sc.Text()) {
			if strings.HasPrefix(f, "/") {
				copyFile(t, f, filepath.Join(rootfs, f))
			}
		}
	}
}

// TestAgentClaudeCode runs the real Claude Code CLI (from npm, in an image
// built here: busybox, bash and the CLI) as `sforge run --agent
// claude-code --disable-internet` on a real dockerd, against a stand-in
// for the Messages API that scripts the conversation: a shell command
// that tries a forbidden host (refused), one that submits to the Judge
// (accepted), one that prints the environment. Directly, with the key in
// the container, and through --api-proxy --api-key-env, with the key only
// on the host and a placeholder in the container.
func TestAgentClaudeCode(t *testing.T) {
	claude := filepath.Join(agentInstall(t, claudeCodePackage), "node_modules", "@anthropic-ai", "claude-code-linux-x64", "claude")
	runtime := requireIsolationPieces(t)
	e := newLauncherEnv(t, map[string]any{"runtimes": map[string]any{"sforge": map[string]any{"path": runtime}}})

	rootfs := t.TempDir()
	bb, err := exec.LookPath("busybox")
	testenv.Require(t, err == nil, "busybox (busybox-static) is needed")
	copyFile(t, bb, filepath.Join(rootfs, "bin", "busybox"))
	for _, applet := range []string{"sh", "wget", "env", "echo", "cat", "ls", "mkdir", "rm", "timeout", "sleep", "grep", "head", "tail", "which", "uname", "id", "ps"} {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	copyWithLibs(t, rootfs, "/bin/bash", "/bin/bash")
	copyWithLibs(t, rootfs, claude, "/usr/local/bin/claude")
	for _, d := range []string{"tmp", "root", "etc", "work"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o1777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "passwd"), []byte("root:x:0:0:root:/root:/bin/bash\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const image = "sforge-test/claude-code:1"
	e.d.ImportImage(t, image, rootfs)

	// The API listens in dockerd's namespace on the Judge's address: the
	// container reaches it when the allowlist says so, and so does the
	// in-process proxy (sforge runs in that namespace).
	api := &fakeapi.Anthropic{Script: []string{
		// Debian's static busybox wget crashes with its own -T.
		"timeout 5 wget -q -O- " + e.forbiddenURL + " && echo LEAKED || echo REFUSED-AS-IT-SHOULD",
		`timeout 10 wget -q -O- --post-data=answer-from-claude "$SFORGE_JUDGE_URL/submit"`,
		"env",
	}}
	var ln net.Listener
	if err := e.d.NetNS.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort(judgeAddr.String(), "9100"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	dir := t.TempDir()
	task := fmt.Sprintf(`{"name":"claude-e2e","image":%q,"agent_query":"Run the three steps.","internet":false,"timeout":"3m"}`, image)
	if err := os.WriteFile(filepath.Join(dir, "task.json"), []byte(task), 0o644); err != nil {
		t.Fatal(err)
	}
	const key = "sk-ant-test-real-key"
	env := []string{launcher.EnvAPIBaseURL + "=http://" + ln.Addr().String(), "ANTHROPIC_API_KEY=" + key}
	for _, mode := range []struct {
		name  string
		flags []string
		// inContainer is the key the agent reads.
		inContainer string
	}{
		{"direct", nil, key},
		{"--api-proxy --api-key-env", []string{"--api-proxy", "--api-key-env", "ANTHROPIC_API_KEY"}, launcher.KeyPlaceholder},
	} {
		t.Run(mode.name, func(t *testing.T) {
			before := len(api.Requests())
			e.mu.Lock()
			e.submissions = nil
			e.mu.Unlock()
			r := e.startSforgeInNetNS(t, env, append([]string{"--task", dir, "--agent", "claude-code", "--disable-internet", "--judge-url", e.judgeURL}, mode.flags...)...)
			code := r.wait(t, 4*time.Minute)
			out, errOut := r.stdout.String(), r.stderr.String()
			if code != 0 || !strings.Contains(out, "done") {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			reqs := api.Requests()[before:]
			var last fakeapi.Request
			for _, q := range reqs {
				if q.Method != http.MethodPost {
					continue
				}
				last = q
				if q.Key != key {
					t.Errorf("the API got key %q on %s, want the real one", q.Key, q.Path)
				}
			}
			if len(last.Results) != 3 {
				t.Fatalf("the conversation ended with %d command results, want 3: %+v\nstderr:\n%s", len(last.Results), reqs, errOut)
			}
			if !strings.Contains(last.Results[0], "REFUSED-AS-IT-SHOULD") || strings.Contains(last.Results[0], "forbidden answered") {
				t.Errorf("the forbidden fetch: %q", last.Results[0])
			}
			if !strings.Contains(last.Results[1], "verdict: accepted") {
				t.Errorf("the Judge submission: %q", last.Results[1])
			}
			e.mu.Lock()
			subs := strings.Join(e.submissions, "\n")
			e.mu.Unlock()
			if !strings.Contains(subs, "answer-from-claude") {
				t.Errorf("the Judge got %q", subs)
			}
			agentEnv := last.Results[2]
			if !strings.Contains(agentEnv, "ANTHROPIC_API_KEY="+mode.inContainer+"\n") {
				t.Errorf("the agent's ANTHROPIC_API_KEY is not %q:\n%s", mode.inContainer, agentEnv)
			}
			if mode.inContainer != key && strings.Contains(agentEnv, key) {
				t.Errorf("the real key is in the container:\n%s", agentEnv)
			}
			e.requireNoContainers(t)
		})
	}
}
