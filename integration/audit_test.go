package integration

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sforge-dev/netiso/audit"
)

// The attempts an audited container makes with the probe (one packet
// each: a refused TCP connect is reset, a UDP datagram and an ICMP echo
// are refused at once), and the per-destination counts they must leave in
// the audit line, most refused first; the lookups it makes of its own
// resolver, and the names refused.
var (
	auditAllowlist = regAllowlist + ";resolver:127.0.0.53;name:judge.sforge.test=" + regJudge4
	auditProbe     = []string{
		"dns", "github.com@127.0.0.53", "dns", "GitHub.com@127.0.0.53", "dns", "x.tunnel.sforge.invalid@127.0.0.53",
		"dns", "judge.sforge.test@127.0.0.53", // pinned: answered, not counted
		"tcp", regJudgeOther, "tcp", regJudgeOther, "tcp", regJudgeOther,
		"udp", regJudgeUDP, "udp", regJudgeUDP,
		"icmp", regJudge4,
		"tcp6", regJudge6TCP,
		"tcp", regJudgeTCP, // allowed: not counted
	}
	auditWant = []string{
		"tcp " + strings.Replace(regJudgeOther, ":", " ", 1) + ": 3",
		"udp " + strings.Replace(regJudgeUDP, ":", " ", 1) + ": 2",
		"icmp " + regJudge4 + " 0: 1",
		"tcp " + regJudge6 + " 8080: 1",
	}
	auditWantTotal = uint64(7)
	auditWantNames = []string{"github.com: 2", "x.tunnel.sforge.invalid: 1"}
)

// auditRecord waits (bounded) for the audit line of container id in the
// log at path and returns it (the last one, should the id recur).
func auditRecord(t *testing.T, path, id string) audit.Record {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		recs, err := audit.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatalf("audit log: %v", err)
		}
		slices.Reverse(recs)
		if i := slices.IndexFunc(recs, func(r audit.Record) bool { return r.Container == id }); i >= 0 {
			return recs[i]
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(path)
			t.Fatalf("no audit line for container %s in %s:\n%s", id, path, data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkAudit compares an audit line with the probe's attempts.
func checkAudit(t *testing.T, r audit.Record, allowlist string) {
	t.Helper()
	t.Logf("audit line: %+v", r)
	if r.Error != "" || r.Allowlist != allowlist || r.Engine == "" {
		t.Errorf("audit line error %q allowlist %q engine %q, want no error, %q", r.Error, r.Allowlist, allowlist, r.Engine)
	}
	if res := r.Resolver; res == nil {
		t.Errorf("no resolver in the audit line")
	} else {
		var names []string
		for _, n := range res.BlockedNames {
			names = append(names, fmt.Sprintf("%s: %d", n.Name, n.Count))
		}
		if res.Error != "" || res.Address != "127.0.0.53" || res.Answered != 1 || res.BlockedNamesTotal != 3 || strings.Join(names, "\n") != strings.Join(auditWantNames, "\n") {
			t.Errorf("resolver %+v, names:\n%s\nwant:\n%s", *res, strings.Join(names, "\n"), strings.Join(auditWantNames, "\n"))
		}
	}
	if r.BlockedTotal != auditWantTotal {
		t.Errorf("blocked_total %d, want %d", r.BlockedTotal, auditWantTotal)
	}
	if !r.PerDestination {
		return
	}
	var got []string
	for _, d := range r.Blocked {
		got = append(got, fmt.Sprintf("%s %s %d: %d", d.Proto, d.Destination, d.Port, d.Count))
	}
	if strings.Join(got, "\n") != strings.Join(auditWant, "\n") || r.BlockedUncounted != 0 {
		t.Errorf("blocked (uncounted %d):\n%s\nwant:\n%s", r.BlockedUncounted, strings.Join(got, "\n"), strings.Join(auditWant, "\n"))
	}
}
