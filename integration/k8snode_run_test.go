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

// runTaskOnNode runs `sforge run --backend k8s --disable-internet` of task
// with the command agent on the test node, the judge counters reset
// first, with extra flags; it returns the exit code, the output and the
// report's path.
func runTaskOnNode(t *testing.T, c *testcluster.Cluster, ns, sforge string, task map[string]any, extra ...string) (code int, stdout, stderr, report string) {
	t.Helper()
	b, err := json.Marshal(task)
	if err != nil {
		t.Fatal(err)
	}
	taskFile := filepath.Join(t.TempDir(), "task.json")
	if err := os.WriteFile(taskFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Judge.ResetCounters(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	report = filepath.Join(t.TempDir(), "report.json")
	args := append([]string{"run", "--backend", "k8s",
		"--kubeconfig", c.HostKubeconfig(t, testk8s.Admin), "--namespace", ns,
		"--task", taskFile, "--agent", "command", "--disable-internet", "--report", report,
		"--judge-url", fmt.Sprintf("http://%s:%d", testcluster.JudgeIP, testcluster.JudgePort),
		"--timeout", "3m"}, extra...)
	run := exec.CommandContext(ctx, sforge, args...)
	var out, errOut bytes.Buffer
	run.Stdout, run.Stderr = &out, &errOut
	err = run.Run()
	code = run.ProcessState.ExitCode()
	t.Logf("sforge run exited %d (%v)\nstderr:\n%s", code, err, errOut.String())
	return code, out.String(), errOut.String(), report
}

// testNodeSforgeRun is the user's path on a real node: `sforge run
// --backend k8s --disable-internet` with the probe as the agent, from the
// host with an ordinary kubeconfig. The agent's very first packet
// (forbidden) is refused, then the full hostile probe matrix runs: the
// Judge and the Pod's resolver reached, every escape attempt refused, not
// one forbidden packet in the judge namespace. Its output streams to the
// terminal, its exit code is the command's, and the Pod and its
// NetworkPolicy are gone afterwards. The Pod has no resolver (the
// default): the cluster's is out of reach, and no query leaves it.
func testNodeSforgeRun(t *testing.T, c *testcluster.Cluster, ns string) {
	sforge := testbin.Build(t, "./cmd/sforge")
	matrix := matrixJSON(t, map[string]any{
		"allowed": []string{judgeTarget},
		// OtherPort has a listener: refusing it is the allowlist's doing.
		"forbidden_port":  testcluster.OtherPort,
		"forbidden":       []string{testcluster.InternetIP},
		"canary":          internetTarget,
		"forbidden6":      []string{testcluster.JudgeIP6},
		"neighbours":      []string{testcluster.NodeIP},
		"neighbour_ports": []int{testcluster.KubeletPort},
		"dns_servers":     []string{testcluster.ClusterDNS, testcluster.InternetIP},
		"timeout":         "2s",
	})
	// The first command's exit status 1 (refused) plus twice the matrix's
	// (0: every verdict passed), plus 40: 41, which sforge itself never
	// uses.
	script := fmt.Sprintf("%s --timeout 3s tcp %s; first=$?; %s matrix --config-json '%s'; exit $((40 + first + 2 * $?))",
		testcluster.ProbePath, internetTarget, testcluster.ProbePath, matrix)
	code, stdout, stderr, report := runTaskOnNode(t, c, ns, sforge, map[string]any{
		"name": "node-e2e", "image": testcluster.ProbeImage,
		"agent_query": "probe the network", "command": []string{"sh", "-c", script},
	})
	// The agent's exit code is sforge's.
	if code != 41 {
		t.Errorf("exit code %d, want the agent's 41 (first connect refused, every matrix verdict passed)\nstdout:\n%s", code, stdout)
	}
	// The first line streamed is the first, forbidden connect: refused by
	// a rule at once, not timed out.
	first, _, _ := strings.Cut(strings.TrimSpace(stdout), "\n")
	res := testbundle.ParseProbe(t, first)
	if r, ok := res["tcp "+internetTarget]; !ok || r.OK || strings.Contains(r.Error, "timeout") {
		t.Errorf("first line %q: want tcp %s refused at once", first, internetTarget)
	}
	// Every verdict of the matrix streamed by sforge run passed.
	requireMatrixPass(t, stdout, append(matrixKinds, "neighbour-tcp", "neighbour-icmp", "dns-tunnel-udp", "ipv6-udp")...)
	cnt := requireNoForbiddenAtJudge(t, c, "the agent")
	if cnt[testcluster.CounterJudge] == 0 {
		t.Errorf("no packet counted as %s: the positive control did not go through the judge namespace", testcluster.CounterJudge)
	}
	if cnt[testcluster.CounterDNS] != 0 {
		t.Errorf("%d packet(s) reached the cluster's resolver from a Pod without one", cnt[testcluster.CounterDNS])
	}
	// What the rules refused, from sforge-cni's Event at the Pod's end:
	// the first connect's destination among them, and the summary line.
	rep := readReport(t, report)
	total, _ := rep["blocked_total"].(float64)
	found := false
	blocked, _ := rep["blocked"].([]any)
	for _, b := range blocked {
		m, _ := b.(map[string]any)
		if fmt.Sprintf("%v:%v", m["destination"], m["port"]) == internetTarget && m["proto"] == "tcp" && m["count"].(float64) >= 1 {
			found = true
		}
	}
	validateReportFile(t, report)
	if en, _ := rep["enforcement"].(map[string]any); en == nil || en["ruleset_matches"] != true || en["source"] != "sforge-cni" {
		t.Errorf("report enforcement %v, want sforge-cni's read back to match the allowlist's", rep["enforcement"])
	}
	if total < 1 || !found || rep["blocked_error"] != nil {
		t.Errorf("report blocked_total %v, blocked %v, error %v: want the refused connect to %s counted", rep["blocked_total"], rep["blocked"], rep["blocked_error"], internetTarget)
	}
	if want := fmt.Sprintf("sforge: %d attempts to %d forbidden destinations were refused (see %s)", int(total), len(blocked), report); !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q", want)
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
