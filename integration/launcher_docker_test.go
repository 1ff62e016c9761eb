package integration

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// TestLauncherDocker runs the real bin/sforge against a real private
// dockerd: the open-network path end to end (image built from setup_cmds,
// judge answering, output streamed, exit code propagated, container gone),
// timeout and SIGINT mid-run, and the fail-closed paths that need no hook:
// no sforge runtime registered, and a runtime that fails.
func TestLauncherDocker(t *testing.T) {
	e := newLauncherEnv(t, nil)
	example := filepath.Join(repoRoot(t), "examples", "hello-judge")

	t.Run("hello-judge with the network open", func(t *testing.T) {
		report := filepath.Join(t.TempDir(), "report.json")
		// --env NAME copies the variable from sforge's environment.
		code, out, errOut := e.run(t, []string{"FORBIDDEN_URLS=" + e.forbiddenURL + " " + e.v6URL},
			"--task", example, "--agent", "command", "--enable-internet", "--judge-url", e.judgeURL, "--report", report, "--env", "FORBIDDEN_URLS")
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		}
		for _, want := range []string{
			"agent: dependency says: installed at image build time",
			"agent: the judge answered: judge: received 20 bytes, verdict: accepted",
			"agent: it answered (the network is open for this run): forbidden answered",
			"agent: it answered (the network is open for this run): ipv6 answered",
			"agent: done",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q\nstdout:\n%s\nstderr:\n%s", want, out, errOut)
			}
		}
		if strings.Contains(out, "Network access is restricted") {
			t.Error("the network notice was added although the network is open")
		}
		if !strings.Contains(errOut, "sforge: network open (--enable-internet)") || !strings.Contains(errOut, "Step") {
			t.Errorf("stderr lacks the isolation line or the build progress:\n%s", errOut)
		}
		rep := readReport(t, report)
		if rep["status"] != "exited" || rep["exit_code"].(float64) != 0 || rep["isolated"] != false ||
			!strings.HasPrefix(rep["image"].(string), "sforge/task:hello-judge-") || rep["allowlist"] != nil {
			t.Errorf("report %v", rep)
		}
		e.requireNoContainers(t)
	})

	t.Run("exit code and both output streams", func(t *testing.T) {
		code, out, errOut := e.run(t, nil, "--task", example, "--agent", "command", "--enable-internet",
			"--", "/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 7")
		if code != 7 || out != "to-stdout\n" || !strings.Contains(errOut, "to-stderr\n") || !strings.Contains(errOut, "sforge: agent exited with status 7") {
			t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errOut)
		}
		e.requireNoContainers(t)
	})

	// The agent's requirements are looked for in the image before the
	// container starts: busybox has neither claude nor bash; an image
	// that has both (a stand-in claude) runs it.
	t.Run("agent requirements", func(t *testing.T) {
		dir := t.TempDir()
		write := func(task string) {
			if err := os.WriteFile(filepath.Join(dir, "task.json"), []byte(task), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write(`{"name":"needs-claude","image":"` + exampleImage + `","agent_query":"hello"}`)
		code, out, errOut := e.run(t, nil, "--task", dir, "--agent", "claude-code", "--enable-internet")
		if code == 0 || !strings.Contains(errOut, "image "+exampleImage+" lacks claude, bash, which agent claude-code needs (it requires claude, bash)") || strings.Contains(out, "hello") {
			t.Errorf("exit %d\nstdout %q\nstderr %q: want a refusal naming claude and bash", code, out, errOut)
		}
		e.requireNoContainers(t)
		write(`{"name":"has-claude","image":"` + exampleImage + `","agent_query":"hello","setup_cmds":[` +
			`"mkdir -p /usr/local/bin && printf '#!/bin/sh\\necho stand-in claude: \"$*\"\\n' > /usr/local/bin/claude && chmod +x /usr/local/bin/claude && ln -s /bin/sh /bin/bash"]}`)
		code, out, errOut = e.run(t, nil, "--task", dir, "--agent", "claude-code", "--enable-internet")
		if code != 0 || !strings.Contains(out, "stand-in claude: -p --dangerously-skip-permissions hello") {
			t.Errorf("exit %d\nstdout %q\nstderr %q: want the stand-in claude run", code, out, errOut)
		}
		e.requireNoContainers(t)
	})

	t.Run("timeout kills the agent", func(t *testing.T) {
		start := time.Now()
		code, out, errOut := e.run(t, nil, "--task", example, "--agent", "command", "--enable-internet", "--timeout", "3s",
			"--", "/bin/sh", "-c", "echo started; sleep 600")
		if code != 124 || !strings.Contains(errOut, "sforge: the agent did not finish within 3s (timeout from --timeout); it was killed and its container removed") {
			t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errOut)
		}
		if d := time.Since(start); d > 2*time.Minute {
			t.Fatalf("took %s", d)
		}
		e.requireNoContainers(t)
	})

	t.Run("SIGINT mid-run removes the container", func(t *testing.T) {
		report := filepath.Join(t.TempDir(), "report.json")
		r := e.startSforge(t, nil, "--task", example, "--agent", "command", "--enable-internet", "--report", report,
			"--", "/bin/sh", "-c", "echo started; sleep 600")
		r.waitLine(t, "started", 3*time.Minute)
		if len(e.containers(t)) != 1 {
			t.Fatalf("want the agent's container running, have %v", e.containers(t))
		}
		if err := r.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		code := r.wait(t, time.Minute)
		// "during start" is possible too: the agent's first line can arrive
		// before the start request has returned.
		if code != 130 || !strings.Contains(r.stderr.String(), "everything the run created was removed") {
			t.Fatalf("exit %d\nstderr:\n%s", code, r.stderr)
		}
		e.requireNoContainers(t)
		if rep := readReport(t, report); rep["status"] != "interrupted" {
			t.Fatalf("report %v", rep)
		}
	})

	t.Run("SIGTERM during the image build", func(t *testing.T) {
		dir := t.TempDir()
		task := `{"name":"slow-build","image":"` + exampleImage + `","setup_cmds":["echo building-now; sleep 20"],"agent_query":"q","command":["/bin/true"]}`
		if err := os.WriteFile(filepath.Join(dir, "task.json"), []byte(task), 0o644); err != nil {
			t.Fatal(err)
		}
		r := e.startSforge(t, nil, "--task", dir, "--agent", "command", "--enable-internet")
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(r.stderr.String(), "building-now") && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := r.wait(t, 2*time.Minute); code != 130 || !strings.Contains(r.stderr.String(), "interrupted during image preparation") {
			t.Fatalf("exit %d\nstderr:\n%s", code, r.stderr)
		}
		// The daemon removes the build's intermediate container once the
		// client is gone, but Docker 20.10's classic builder may first let
		// the running step finish (seen under load: the container outlived
		// the client by seconds and leaked into the next subtest). The step
		// sleeps 20 s, so within a minute it must be gone.
		for i := 0; i < 300 && len(e.containers(t)) > 0; i++ {
			time.Sleep(200 * time.Millisecond)
		}
		e.requireNoContainers(t)
	})

	t.Run("--api-proxy with key injection, agent from an agents config", func(t *testing.T) {
		// The upstream API listens on the loopback of dockerd's namespace:
		// only the in-process proxy (on the bridge gateway, same namespace)
		// can reach it, so the agent's answer proves the proxy path.
		var ln net.Listener
		err := e.d.NetNS.Do(func(ns.NetNS) error {
			var err error
			ln, err = net.Listen("tcp", "127.0.0.1:0")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "api: %s %s key=%s\n", r.Method, r.URL.Path, r.Header.Get("X-Api-Key"))
		})}
		go srv.Serve(ln)
		defer srv.Close()
		cfg := filepath.Join(t.TempDir(), "agents.json")
		agents := `{"agents": {"probe": {"base_url_env": "PROBE_BASE_URL", "api_key_header": "X-Api-Key", "pass_env": ["PROBE_KEY"],
			"command": ["/bin/sh", "-c", "echo key-in-container=${PROBE_KEY:-none}; timeout 10 wget -q -O - \"$PROBE_BASE_URL/v1/messages\""]}}}`
		if err := os.WriteFile(cfg, []byte(agents), 0o644); err != nil {
			t.Fatal(err)
		}
		r := e.startSforgeInNetNS(t, []string{"SFORGE_AGENT_API_BASE_URL=http://" + ln.Addr().String(), "PROBE_KEY=sk-real"},
			"--task", example, "--agent", "probe", "--agents-config", cfg, "--enable-internet", "--api-proxy", "--api-key-env", "PROBE_KEY")
		if code := r.wait(t, 3*time.Minute); code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s\nbridge: %s", code, r.stdout, r.stderr, e.d.MustDocker(t, "network", "inspect", "bridge"))
		}
		out := r.stdout.String()
		if !strings.Contains(out, "key-in-container=none") || !strings.Contains(out, "api: GET /v1/messages key=sk-real") {
			t.Fatalf("stdout:\n%s\nstderr:\n%s", out, r.stderr)
		}
		e.requireNoContainers(t)
	})

	t.Run("isolated run refused without the sforge runtime", func(t *testing.T) {
		code, out, errOut := e.run(t, nil, "--task", example, "--agent", "command", "--disable-internet", "--judge-url", e.judgeURL)
		if code != 1 || !strings.Contains(errOut, `has no "sforge" runtime`) || !strings.Contains(errOut, "run `sforge install --docker` as root") {
			t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errOut)
		}
		if strings.Contains(out, "agent:") {
			t.Fatalf("the agent ran: %s", out)
		}
		e.requireNoContainers(t)
	})

	t.Run("isolated run fails closed when the runtime fails", func(t *testing.T) {
		// A stand-in runtime that refuses every container, as the real one
		// does when it cannot install the rules.
		broken := filepath.Join(t.TempDir(), "broken-runtime")
		script := "#!/bin/sh\necho 'sforge-runtime: cannot enforce isolation (test stand-in)' >&2\nexit 1\n"
		if err := os.WriteFile(broken, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		e.setRuntime(t, broken, nil)
		code, out, errOut := e.run(t, nil, "--task", example, "--agent", "command", "--disable-internet", "--judge-url", e.judgeURL)
		if code != 1 || !strings.Contains(errOut, "the agent did not run") {
			t.Fatalf("exit %d\nstdout %q\nstderr %q", code, out, errOut)
		}
		if strings.Contains(out, "agent:") {
			t.Fatalf("the agent ran: %s", out)
		}
		e.requireNoContainers(t)
	})
}
