package verify

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/launcher/task"
)

func TestMatrixConfig(t *testing.T) {
	got, err := MatrixConfig(Request{JudgeURL: "http://judge.example:8080/x", APIURL: "https://api.example", Canary: "203.0.113.10:80", Neighbours: []string{"172.17.0.3"}})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(got), &cfg); err != nil {
		t.Fatal(err)
	}
	if a, _ := json.Marshal(cfg["allowed"]); string(a) != `["judge.example:8080","api.example:443"]` {
		t.Errorf("allowed %s", a)
	}
	if f, _ := json.Marshal(cfg["forbidden"]); string(f) != `["203.0.113.10"]` {
		t.Errorf("forbidden %s", f)
	}
	for _, tc := range []struct {
		r    Request
		want string
	}{
		{Request{JudgeURL: "ftp://x"}, "--judge-url"},
		{Request{JudgeURL: "http://x:1", APIURL: "nope"}, "--api-url"},
		{Request{JudgeURL: "http://x:1", Canary: "203.0.113.10"}, "--canary"},
	} {
		if _, err := MatrixConfig(tc.r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.r, err, tc.want)
		}
	}
}

// TestWriteTask: the throw-away task passes the launcher's strict loader
// in both forms.
func TestWriteTask(t *testing.T) {
	probe := filepath.Join(t.TempDir(), "sforge-probe")
	if err := os.WriteFile(probe, []byte("\x7fELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, r := range []Request{{Probe: probe}, {Image: "example/probe:1"}} {
		dir := t.TempDir()
		p, err := WriteTask(dir, r, `{"allowed":["a:1"]}`)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := task.Load(p)
		if err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if tk.Internet == nil || *tk.Internet || tk.Command[0] != ProbeInImage || tk.Command[3] != `{"allowed":["a:1"]}` {
			t.Errorf("task %+v", tk)
		}
		if r.Image == "" && (tk.Build == nil || tk.Image != "") {
			t.Errorf("no build for the probe: %+v", tk)
		}
	}
	if _, err := WriteTask(t.TempDir(), Request{}, "{}"); err == nil || !strings.Contains(err.Error(), "--probe") {
		t.Errorf("no probe: %v", err)
	}
}

func TestJudge(t *testing.T) {
	out := "sforge: noise\n" +
		`{"check":"control-tcp","target":"j:1","expect":"reachable","got":"reachable","pass":true}` + "\n" +
		`{"check":"canary-tcp","target":"c:1","expect":"refused","got":"reachable","pass":false}` + "\n" +
		`{"check":"control-tcp","target":"a:1","expect":"reachable","got":"refused","pass":false,"error":"x"}` + "\n" +
		`{"check":"raw-socket","target":"r","expect":"refused","got":"refused","pass":true}` + "\n"
	rep := &Report{Backend: "docker", Verdicts: ParseVerdicts(out)}
	rep.judge()
	if len(rep.Verdicts) != 4 || rep.OK || rep.Leaks != 1 || rep.FailedControls != 1 {
		t.Fatalf("report %+v", rep)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CHECK", "LEAK", "FAILED CONTROL", "isolation NOT verified on docker: 1 leak(s), 1 failed control(s)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	// No verdict at all is a failure, never a pass.
	empty := &Report{Backend: "docker"}
	empty.judge()
	if empty.OK {
		t.Fatal("a report without verdicts passed")
	}
	// A warning finding does not fail; a failed finding does.
	ok := &Report{Verdicts: ParseVerdicts(out)[:1], Findings: []Finding{{Check: "networkpolicy", Warning: true}}}
	ok.judge()
	if !ok.OK {
		t.Fatal("a warning failed the verification")
	}
	ok.Findings = append(ok.Findings, Finding{Check: "sforge-cni ran"})
	ok.judge()
	if ok.OK {
		t.Fatal("a failed finding passed")
	}
}
