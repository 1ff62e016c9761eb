package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sforge-dev/netiso/internal/testbin"
	"github.com/sforge-dev/netiso/internal/testbundle"
	"github.com/sforge-dev/netiso/internal/testcluster"
	"github.com/sforge-dev/netiso/internal/testk8s"
)

// testNodeSforgeRun is the user's path on a real node: `sforge run
// --backend k8s --disable-internet` with the probe as the agent, from the
// host with an ordinary kubeconfig. The agent reaches the Judge and nothing
// else, its very first packet (forbidden) is refused, its output streams to
// the terminal, its exit code is the command's, and the Pod and its
// NetworkPolicy are gone afterwards.
func testNodeSforgeRun(t *testing.T, c *testcluster.Cluster, ns string) {
	sforge := testbin.Build(t, "./cmd/sforge")
	cmd := []string{testcluster.ProbePath, "--timeout", "3s"}
	for _, pc := range nodeProbeChecks {
		cmd = append(cmd, pc.check, pc.target)
	}
	// The shell turns the probe's exit status 1 (some checks refused)
	// into 41, which sforge itself never uses.
	script := strings.Join(cmd, " ") + "; exit $(($? + 40))"
	task, err := json.Marshal(map[string]any{
		"name": "node-e2e", "image": testcluster.ProbeImage,
		"agent_query": "probe the network", "command": []string{"sh", "-c", script},
	})
	if err != nil {
		t.Fatal(err)
	}
	taskFile := filepath.Join(t.TempDir(), "task.json")
	if err := os.WriteFile(taskFile, task, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Judge.ResetCounters(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, sforge, "run", "--backend", "k8s",
		"--kubeconfig", c.HostKubeconfig(t, testk8s.Admin), "--namespace", ns,
		"--task", taskFile, "--agent", "command", "--disable-internet",
		"--judge-url", fmt.Sprintf("http://%s:%d", testcluster.JudgeIP, testcluster.JudgePort),
		"--timeout", "3m")
	var stdout, stderr bytes.Buffer
	run.Stdout, run.Stderr = &stdout, &stderr
	err = run.Run()
	code := run.ProcessState.ExitCode()
	t.Logf("sforge run exited %d (%v)\nstderr:\n%s", code, err, stderr.String())
	// The agent's exit code is sforge's.
	if code != 41 {
		t.Fatalf("exit code %d, want the agent's 41\nstdout:\n%s", code, stdout.String())
	}
	res := testbundle.ParseProbe(t, stdout.String())
	for _, pc := range nodeProbeChecks {
		r, ok := res[pc.check+" "+pc.target]
		if !ok {
			t.Errorf("the agent's output (streamed by sforge run) lacks %s %s:\n%s", pc.check, pc.target, stdout.String())
			continue
		}
		if r.OK != pc.isolated {
			t.Errorf("%s %s: ok=%v, want %v (error %q)", pc.check, pc.target, r.OK, pc.isolated, r.Error)
		}
	}
	if r := res["tcp "+internetTarget]; strings.Contains(r.Error, "timeout") {
		t.Errorf("the first, forbidden connect timed out instead of being refused: %s", r.Error)
	}
	cnt, err := c.Judge.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{testcluster.CounterForbidden4, testcluster.CounterForbidden6} {
		if cnt[n] != 0 {
			t.Errorf("%d packet(s) of the agent reached the judge namespace as %s", cnt[n], n)
		}
	}
	if cnt[testcluster.CounterJudge] == 0 {
		t.Error("no packet reached the Judge: the positive control did not run")
	}
	cs := c.Client(t)
	lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer lcancel()
	pods, err := cs.CoreV1().Pods(ns).List(lctx, metav1.ListOptions{LabelSelector: "sforge-pod"})
	if err != nil {
		t.Fatal(err)
	}
	pols, err := cs.NetworkingV1().NetworkPolicies(ns).List(lctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("pod %s left after sforge run", p.Name)
		}
	}
	for _, p := range pols.Items {
		if strings.HasPrefix(p.Name, "sforge-iso-node-e2e") {
			t.Errorf("NetworkPolicy %s left after sforge run", p.Name)
		}
	}
}
