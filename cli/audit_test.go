package cli

import (
	"bytes"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sforge-dev/netiso/audit"
	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/resolver"
)

func TestAuditTable(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	d := func(addr string, port uint16, n uint64) engine.RefusedDestination {
		return engine.RefusedDestination{Proto: "tcp", Destination: netip.MustParseAddr(addr), Port: port, Count: n}
	}
	for i, r := range []audit.Record{
		{Container: "aaaaaaaaaaaaaaaa", Engine: "nftables", PerDestination: true, BlockedTotal: 0, Time: now.Add(-3 * time.Hour)},
		{Container: "bbbbbbbbbbbbbbbb", Engine: "nftables", PerDestination: true, BlockedTotal: 12, Blocked: []engine.RefusedDestination{d("198.51.100.7", 443, 9), d("203.0.113.1", 80, 3)}, Time: now.Add(-time.Hour),
			Resolver: audit.NewResolverRecord("127.0.0.53", resolver.Stats{Refused: []resolver.NameCount{{Name: "github.com", Count: 4}}}, nil)},
		{Container: "sandbox1", Pod: "agent-1", Namespace: "agents", Engine: "iptables-nft", BlockedTotal: 5, BlockedUncounted: 5, Time: now.Add(-time.Minute)},
	} {
		r.Schema = audit.Schema
		if err := audit.Append(log, r); err != nil {
			t.Fatal(i, err)
		}
	}
	run := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		root := NewRootCommand(Streams{Out: &out, ErrOut: &errOut})
		root.SetArgs(append([]string{"audit", "--log", log}, args...))
		err := root.Execute()
		return out.String(), err
	}
	out, err := run()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ENDED") || !strings.Contains(lines[1], "agents/agent-1") ||
		!strings.Contains(lines[1], "(totals only: iptables-nft engine)") || !strings.Contains(lines[2], "bbbbbbbbbbbb ") ||
		!strings.Contains(lines[2], "tcp 198.51.100.7:443 ×9, tcp 203.0.113.1:80 ×3") || !strings.Contains(lines[2], "github.com ×4") || !strings.Contains(lines[3], "aaaaaaaaaaaa") {
		t.Fatalf("table, newest first:\n%s", out)
	}
	if out, _ := run("--container", "bbbb"); strings.Count(out, "\n") != 2 {
		t.Errorf("--container bbbb:\n%s", out)
	}
	if out, _ := run("--container", "agent-1", "--json"); !strings.Contains(out, `"pod":"agent-1"`) || strings.Count(out, "\n") != 1 {
		t.Errorf("--container agent-1 --json:\n%s", out)
	}
	if out, _ := run("--limit", "1"); strings.Count(out, "\n") != 2 {
		t.Errorf("--limit 1:\n%s", out)
	}
	if _, err := run("--since", "yesterday"); err == nil || !strings.Contains(err.Error(), "--since") {
		t.Errorf("--since yesterday: %v", err)
	}
	if _, err := run("--log", filepath.Join(t.TempDir(), "none.jsonl")); err == nil || !strings.Contains(err.Error(), "no audit log at") {
		t.Errorf("missing log: %v", err)
	}
}
