package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	gnft "github.com/google/nftables"

	"github.com/sforge-dev/netiso/engine/engines"
	nftengine "github.com/sforge-dev/netiso/engine/nftables"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/policy"
)

// nftConn opens a netlink nf_tables connection in n for inspecting and
// tampering with what the engine installed.
func nftConn(t *testing.T, n ns.NetNS) *gnft.Conn {
	t.Helper()
	c, err := gnft.New(gnft.WithNetNSFd(int(n.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func nftTable(t *testing.T, id string) *gnft.Table {
	t.Helper()
	name, err := nftengine.TableName(id)
	if err != nil {
		t.Fatal(err)
	}
	return &gnft.Table{Name: name, Family: gnft.TableFamilyINet}
}

// nftOurs lists our tables with their chains and sets, "table/chain".
func nftOurs(t *testing.T, n ns.NetNS) []string {
	t.Helper()
	c := nftConn(t, n)
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tb := range tables {
		if !strings.HasPrefix(tb.Name, policy.ChainPrefix) {
			continue
		}
		out = append(out, tb.Name)
		chains, err := c.ListChainsOfTableFamily(tb.Family)
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chains {
			if ch.Table.Name == tb.Name {
				out = append(out, tb.Name+"/"+ch.Name)
			}
		}
		sets, err := c.GetSets(tb)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sets {
			out = append(out, tb.Name+"/@"+s.Name)
		}
	}
	slices.Sort(out)
	return out
}

func nftRuleCount(t *testing.T, n ns.NetNS, id string) int {
	t.Helper()
	c := nftConn(t, n)
	tb := nftTable(t, id)
	chains, err := c.ListChainsOfTableFamily(gnft.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, ch := range chains {
		if ch.Table.Name != tb.Name {
			continue
		}
		rules, err := c.GetRules(tb, ch)
		if err != nil {
			t.Fatal(err)
		}
		total += len(rules)
	}
	return total
}

// nftTamper deletes one allowlist element, as a person with nft might.
func nftTamper(t *testing.T, n ns.NetNS, id string) {
	t.Helper()
	c := nftConn(t, n)
	tb := nftTable(t, id)
	sets, err := c.GetSets(tb)
	if err != nil || len(sets) == 0 {
		t.Fatalf("no set to tamper with: %v", err)
	}
	elems, err := c.GetSetElements(sets[0])
	if err != nil || len(elems) < 2 {
		t.Fatalf("set %s elements: %d, %v", sets[0].Name, len(elems), err)
	}
	if err := c.SetDeleteElements(sets[0], elems[:1]); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("delete element: %v", err)
	}
}

func nftDeleteTable(t *testing.T, n ns.NetNS, id string) {
	t.Helper()
	c := nftConn(t, n)
	c.DelTable(nftTable(t, id))
	if err := c.Flush(); err != nil {
		t.Fatalf("delete table: %v", err)
	}
}

// TestNftablesEngine runs the engine suite against the netlink nftables
// engine.
func TestNftablesEngine(t *testing.T) {
	runEngineSuite(t, engineSuite{
		engine:    nftengine.New(),
		listOurs:  nftOurs,
		tamper:    nftTamper,
		deleteAll: nftDeleteTable,
		ruleCount: nftRuleCount,
		setBased:  true,
	})
}

// TestAutoChoosesNFTables: on this kernel (6.x, nf_tables) auto picks the
// nftables engine, and the probe changes nothing in the host's namespace.
func TestAutoChoosesNFTables(t *testing.T) {
	testenv.RequireRoot(t)
	host, err := gnft.New()
	if err != nil {
		t.Fatal(err)
	}
	before, err := host.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	if err := nftengine.Supported(); err != nil {
		t.Fatalf("probe: %v", err)
	}
	e, err := engines.New(engines.Auto)
	if err != nil {
		t.Fatal(err)
	}
	if e.Name() != nftengine.Name {
		t.Fatalf("auto chose %s, want %s", e.Name(), nftengine.Name)
	}
	after, err := host.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	names := func(ts []*gnft.Table) (out []string) {
		for _, t := range ts {
			out = append(out, fmt.Sprintf("%d/%s", t.Family, t.Name))
		}
		slices.Sort(out)
		return out
	}
	if !slices.Equal(names(before), names(after)) {
		t.Fatalf("the probe changed the host's tables: %v -> %v", names(before), names(after))
	}
}
