//go:build cgo

package cfronttest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"syscall"
	"testing"

	gnft "github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/nftables"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/policy"
)

func endpoint(t *testing.T, proto policy.Protocol, cidr string, port uint16) policy.Endpoint {
	t.Helper()
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.NewEndpoint(p, proto, port)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// nftAllowlists are the cases both installs are compared on.
func nftAllowlists(t *testing.T) []struct {
	name string
	a    policy.Allowlist
} {
	big := policy.Allowlist{}
	for i := 0; i < 128; i++ {
		big.Endpoints = append(big.Endpoints, endpoint(t, policy.TCP, fmt.Sprintf("10.1.%d.%d/32", i/16, i%16+1), uint16(1000+i)))
		big.DNS = append(big.DNS, netip.AddrFrom4([4]byte{10, 2, byte(i / 200), byte(i%200 + 1)}))
	}
	resolvers := policy.Allowlist{Action: policy.Drop}
	for i := 0; i < policy.MaxEntries; i++ {
		resolvers.DNS = append(resolvers.DNS, netip.AddrFrom4([4]byte{10, 3, byte(i / 250), byte(i%250 + 1)}))
	}
	return []struct {
		name string
		a    policy.Allowlist
	}{
		{"empty", policy.Allowlist{}},
		{"one tcp endpoint", policy.Allowlist{Endpoints: []policy.Endpoint{endpoint(t, policy.TCP, "203.0.113.7/32", 443)}}},
		{"dns only", policy.Allowlist{DNS: addrs("1.1.1.1", "8.8.8.8")}},
		{"docker dns listed", policy.Allowlist{DNS: addrs("127.0.0.11"), Endpoints: []policy.Endpoint{endpoint(t, policy.UDP, "198.51.100.0/24", 5000)}}},
		{"else drop", policy.Allowlist{Action: policy.Drop, DNS: addrs("9.9.9.9"), Endpoints: []policy.Endpoint{endpoint(t, policy.TCP, "192.0.2.1/32", 22)}}},
		{"pruning", policy.Allowlist{
			DNS: addrs("10.9.0.53"),
			Endpoints: []policy.Endpoint{
				endpoint(t, policy.TCP, "10.9.0.0/16", 443),
				endpoint(t, policy.TCP, "10.9.1.1/32", 443), // inside the /16: pruned
				endpoint(t, policy.TCP, "10.9.1.2/32", 80),  // other port: kept
				endpoint(t, policy.UDP, "10.9.1.3/32", 443), // other protocol: kept
				endpoint(t, policy.TCP, "10.9.0.53/32", 53), // the resolver's TCP entry: pruned
				endpoint(t, policy.TCP, "10.9.2.0/24", 443), // inside the /16: pruned
				endpoint(t, policy.TCP, "10.10.0.0/24", 443),
			},
		}},
		{"mixed tcp udp one address", policy.Allowlist{Endpoints: []policy.Endpoint{
			endpoint(t, policy.TCP, "192.0.2.10/32", 53),
			endpoint(t, policy.UDP, "192.0.2.10/32", 53),
			endpoint(t, policy.UDP, "192.0.2.10/32", 123),
		}}},
		{"256 entries", big},
		{"256 resolvers", resolvers},
		{"everything", policy.Allowlist{Endpoints: []policy.Endpoint{endpoint(t, policy.TCP, "0.0.0.0/0", 443)}}},
	}
}

// nftList is `nft -j list table inet NAME` inside the namespace, decoded;
// without handles when strip is set.
func nftList(t *testing.T, nsPath, table string, strip bool) any {
	t.Helper()
	nft := testenv.RequireBinary(t, "nft")
	nsenter := testenv.RequireBinary(t, "nsenter")
	out, err := exec.Command(nsenter, "--net="+nsPath, nft, "-j", "list", "table", "inet", table).CombinedOutput()
	if err != nil {
		t.Fatalf("nft list table inet %s in %s: %v\n%s", table, nsPath, err, out)
	}
	var v any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("nft -j output: %v\n%s", err, out)
	}
	if strip {
		v = withoutHandles(v)
	}
	return v
}

// nftConn is a connection of the library's in the namespace at nsPath,
// open until the test ends.
func nftConn(t *testing.T, nsPath string) *gnft.Conn {
	t.Helper()
	f, err := os.Open(nsPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c, err := gnft.New(gnft.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// withoutHandles drops every "handle" field: the kernel numbers objects
// per namespace, in the order they are made.
func withoutHandles(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if k != "handle" {
				out[k] = withoutHandles(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = withoutHandles(e)
		}
		return out
	}
	return v
}

func TestNFTInstallMatchesGo(t *testing.T) {
	testenv.RequireRoot(t)
	for i, tc := range nftAllowlists(t) {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprintf("cfront-nft-%d", i)
			table, err := policy.ChainName(id)
			if err != nil {
				t.Fatal(err)
			}
			goNS := testenv.NewNetNS(t)
			cNS := testenv.NewNetNS(t)
			e := nftables.New()
			rep, err := e.Install(engine.Target{NetNS: goNS.Path(), ID: id}, tc.a)
			if err != nil {
				t.Fatalf("Go install: %v", err)
			}

			n, err := NFTInstall(cNS.Path(), table, tc.a)
			if err != nil {
				t.Fatalf("C install: %v", err)
			}
			if n != rep.Rules {
				t.Fatalf("C install returned %d, the Go plan has %d rules", n, rep.Rules)
			}
			if err := e.Check(engine.Target{NetNS: cNS.Path(), ID: id}, tc.a); err != nil {
				t.Fatalf("Go check of the C install: %v", err)
			}
			got, want := nftList(t, cNS.Path(), table, true), nftList(t, goNS.Path(), table, true)
			if !reflect.DeepEqual(got, want) {
				g, _ := json.MarshalIndent(got, "", " ")
				w, _ := json.MarshalIndent(want, "", " ")
				t.Fatalf("nft -j list differs:\nC:  %s\nGo: %s", g, w)
			}
			// And the Go engine removes what the C made.
			if err := e.Remove(engine.Target{NetNS: cNS.Path(), ID: id}); err != nil {
				t.Fatalf("Go remove of the C install: %v", err)
			}
		})
	}
}

// An allowlist the C's plan differs for must fail Check: the comparison is
// not vacuous.
func TestNFTInstallCheckedAgainstOtherAllowlist(t *testing.T) {
	testenv.RequireRoot(t)
	id := "cfront-nft-other"
	table, _ := policy.ChainName(id)
	ns := testenv.NewNetNS(t)
	a := policy.Allowlist{Endpoints: []policy.Endpoint{endpoint(t, policy.TCP, "203.0.113.7/32", 443)}}
	n, err := NFTInstall(ns.Path(), table, a)
	if err != nil || n == 0 {
		t.Fatalf("C install: %d, %v", n, err)
	}
	b := policy.Allowlist{Endpoints: []policy.Endpoint{endpoint(t, policy.TCP, "203.0.113.7/32", 444)}}
	if err := nftables.New().Check(engine.Target{NetNS: ns.Path(), ID: id}, b); err == nil {
		t.Fatal("Check passed for another allowlist")
	}
}

func TestNFTInstallLeavesExistingTable(t *testing.T) {
	testenv.RequireRoot(t)
	id := "cfront-nft-existing"
	table, _ := policy.ChainName(id)
	ns := testenv.NewNetNS(t)
	a := policy.Allowlist{DNS: addrs("1.1.1.1")}
	if _, err := nftables.New().Install(engine.Target{NetNS: ns.Path(), ID: id}, a); err != nil {
		t.Fatalf("Go install: %v", err)
	}
	before := nftList(t, ns.Path(), table, false)
	other := policy.Allowlist{Action: policy.Drop, Endpoints: []policy.Endpoint{endpoint(t, policy.UDP, "192.0.2.0/24", 9)}}
	n, err := NFTInstall(ns.Path(), table, other)
	if err != nil || n != 0 {
		t.Fatalf("C install over an existing table: %d, %v; want 0", n, err)
	}
	if after := nftList(t, ns.Path(), table, false); !reflect.DeepEqual(before, after) {
		t.Fatalf("the existing table changed:\nbefore: %v\nafter:  %v", before, after)
	}
	if err := nftables.New().Check(engine.Target{NetNS: ns.Path(), ID: id}, a); err != nil {
		t.Fatalf("Check of the untouched table: %v", err)
	}
}

func TestNFTInstallNotANamespace(t *testing.T) {
	testenv.RequireRoot(t)
	table, _ := policy.ChainName("cfront-nft-notns")
	file := filepath.Join(t.TempDir(), "netns")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a := policy.Allowlist{DNS: addrs("1.1.1.1")}
	// On this goroutine's own locked thread (the wrapper's lock nests):
	// the C must leave it in the namespace it found it in.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{file, "/dev/null", "/proc/self/ns/uts", t.TempDir()} {
		n, err := NFTInstall(path, table, a)
		if n != 0 || err != nil {
			t.Errorf("C install into %s: %d, %v; want 0, nil", path, n, err)
		}
		if after, err := os.Readlink("/proc/thread-self/ns/net"); err != nil || after != before {
			t.Fatalf("after the C install into %s the thread is in %s (%v), was in %s", path, after, err, before)
		}
	}
	if _, err := NFTInstall(filepath.Join(t.TempDir(), "missing"), table, a); err == nil {
		t.Error("C install into a missing file: no error")
	}
}

// TestNFTInstallCannotReturn: when the thread cannot setns back to its own
// network namespace, the C install returns -1 with the errno, the thread is
// where it said (in the target's), and nothing was installed there (the
// socket was never used).
func TestNFTInstallCannotReturn(t *testing.T) {
	testenv.RequireRoot(t)
	ns := testenv.NewNetNS(t)
	table, err := policy.ChainName("cfront-nft-stuck")
	if err != nil {
		t.Fatal(err)
	}
	a := policy.Allowlist{DNS: addrs("1.1.1.1"), Endpoints: []policy.Endpoint{endpoint(t, policy.TCP, "192.0.2.1/32", 443)}}
	rules, errno, inTarget, err := NFTInstallStuck(ns.Path(), table, a)
	if err != nil {
		t.Fatal(err)
	}
	if rules != -1 || !errors.Is(errno, syscall.EPERM) || !inTarget {
		t.Fatalf("C install with the way back refused: %d, %v, thread in the target's namespace %v; want -1, EPERM, true", rules, errno, inTarget)
	}
	tables, err := nftConn(t, ns.Path()).ListTables()
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 0 {
		t.Fatalf("%d tables in the namespace after an install that could not return, want none", len(tables))
	}
}

// TestNFTInstallByChild: a thread that could not come back from the
// target's namespace (the way back refused, and the C told so, as a
// rootless engine's hook is by the ownership of its namespace) has a child
// open the socket there: the install is whole and verified, the Go engine
// finds what it would have made, and the thread never left its namespace.
func TestNFTInstallByChild(t *testing.T) {
	testenv.RequireRoot(t)
	ns := testenv.NewNetNS(t)
	const id = "cfront-nft-by-child"
	table, err := policy.ChainName(id)
	if err != nil {
		t.Fatal(err)
	}
	a := policy.Allowlist{DNS: addrs("1.1.1.1"), Endpoints: []policy.Endpoint{endpoint(t, policy.TCP, "192.0.2.1/32", 443)}}
	rules, errno, inTarget, err := NFTInstallStuckByChild(ns.Path(), table, a)
	if err != nil {
		t.Fatal(err)
	}
	e := nftables.New()
	if rules <= 0 || inTarget {
		t.Fatalf("C install by a child: %d rules (%v), thread moved to the target's namespace %v; want the plan's rules, false", rules, errno, inTarget)
	}
	if err := e.Check(engine.Target{NetNS: ns.Path(), ID: id}, a); err != nil {
		t.Fatalf("Go check of the C install by a child: %v", err)
	}
	if err := e.Remove(engine.Target{NetNS: ns.Path(), ID: id}); err != nil {
		t.Fatal(err)
	}
}

// comparedAllowlists is an allowlist and others that differ from it in one
// way each, for the tests of the C's comparison with its plan.
func comparedAllowlists(t *testing.T) (policy.Allowlist, map[string]policy.Allowlist) {
	ep := func(proto policy.Protocol, cidr string, port uint16) policy.Endpoint {
		return endpoint(t, proto, cidr, port)
	}
	a := policy.Allowlist{
		DNS:       addrs("1.1.1.1"),
		Endpoints: []policy.Endpoint{ep(policy.TCP, "10.0.0.0/8", 443), ep(policy.UDP, "192.0.2.1/32", 53)},
	}
	return a, map[string]policy.Allowlist{
		"empty":        {},
		"drop":         {Action: policy.Drop, DNS: a.DNS, Endpoints: a.Endpoints},
		"other port":   {DNS: a.DNS, Endpoints: []policy.Endpoint{ep(policy.TCP, "10.0.0.0/8", 444), a.Endpoints[1]}},
		"other proto":  {DNS: a.DNS, Endpoints: []policy.Endpoint{ep(policy.UDP, "10.0.0.0/8", 443), a.Endpoints[1]}},
		"narrower":     {DNS: a.DNS, Endpoints: []policy.Endpoint{ep(policy.TCP, "10.0.0.0/9", 443), a.Endpoints[1]}},
		"one fewer":    {DNS: a.DNS, Endpoints: a.Endpoints[:1]},
		"one more":     {DNS: a.DNS, Endpoints: append([]policy.Endpoint{ep(policy.TCP, "192.0.2.9/32", 1)}, a.Endpoints...)},
		"no dns":       {Endpoints: a.Endpoints},
		"docker dns":   {DNS: addrs("1.1.1.1", "127.0.0.11"), Endpoints: a.Endpoints},
		"other dns":    {DNS: addrs("1.1.1.2"), Endpoints: a.Endpoints},
		"only the dns": {DNS: a.DNS},
	}
}

// The C's comparison, given the Go engine's table read back, accepts it for
// the same allowlist and refuses it for any other: what it compares is what
// matters.
func TestNFTVerify(t *testing.T) {
	testenv.RequireRoot(t)
	id := "cfront-nft-verify"
	table, _ := policy.ChainName(id)
	ns := testenv.NewNetNS(t)
	a, others := comparedAllowlists(t)
	if ok, err := NFTVerify(ns.Path(), table, a); err != nil || ok {
		t.Fatalf("verify without a table: %t, %v; want false", ok, err)
	}
	if _, err := nftables.New().Install(engine.Target{NetNS: ns.Path(), ID: id}, a); err != nil {
		t.Fatalf("Go install: %v", err)
	}
	if ok, err := NFTVerify(ns.Path(), table, a); err != nil || !ok {
		t.Fatalf("verify of the Go install: %t, %v; want true", ok, err)
	}
	for name, b := range others {
		if ok, err := NFTVerify(ns.Path(), table, b); err != nil || ok {
			t.Errorf("verify for %s: %t, %v; want false", name, ok, err)
		}
	}
}

// The install compares the kernel's echoes of its batch with its plan: a
// plan that is not the batch's (another allowlist's) is refused, the table
// deleted again and the install left to Go (0); the batch's own plan is
// accepted. So the echoes are read and compared, not just counted.
func TestNFTInstallEchoesComparedWithPlan(t *testing.T) {
	testenv.RequireRoot(t)
	table, _ := policy.ChainName("cfront-nft-echo")
	a, others := comparedAllowlists(t)
	ns := testenv.NewNetNS(t)
	n, err := NFTInstallOther(ns.Path(), table, a, a)
	if err != nil || n != 13 {
		t.Fatalf("C install compared with its own plan: %d, %v; want 13", n, err)
	}
	for name, b := range others {
		t.Run(name, func(t *testing.T) {
			ns := testenv.NewNetNS(t)
			n, err := NFTInstallOther(ns.Path(), table, a, b)
			if err != nil || n != 0 {
				t.Fatalf("C install compared with another plan: %d, %v; want 0", n, err)
			}
			tables, err := nftConn(t, ns.Path()).ListTables()
			if err != nil {
				t.Fatal(err)
			}
			if len(tables) != 0 {
				t.Fatalf("%d tables left after a refused comparison, want none", len(tables))
			}
		})
	}
}

// A table that differs from the plan in one place only, made by changing a
// Go install with the library in the test namespace: the C's comparison
// refuses it, as the Go engine's Check does.
func TestNFTVerifyTampered(t *testing.T) {
	testenv.RequireRoot(t)
	a := policy.Allowlist{
		DNS:       addrs("1.1.1.1"),
		Endpoints: []policy.Endpoint{endpoint(t, policy.TCP, "10.0.0.0/8", 443), endpoint(t, policy.UDP, "192.0.2.1/32", 53)},
	}
	key := func(addr [4]byte, proto byte, port uint16) []byte {
		return []byte{addr[0], addr[1], addr[2], addr[3], proto, 0, 0, 0, byte(port >> 8), byte(port), 0, 0}
	}
	accept := gnft.ChainPolicyAccept
	drop := gnft.ChainPolicyDrop
	cases := map[string]func(c *gnft.Conn, tb *gnft.Table) error{
		"rule expression": func(c *gnft.Conn, tb *gnft.Table) error {
			ch := &gnft.Chain{Name: "ipv6", Table: tb}
			rules, err := c.GetRules(tb, ch)
			if err != nil || len(rules) == 0 {
				return fmt.Errorf("rules of ipv6: %d, %v", len(rules), err)
			}
			last := rules[len(rules)-1]
			c.ReplaceRule(&gnft.Rule{Table: tb, Chain: ch, Handle: last.Handle, UserData: last.UserData,
				Exprs: []expr.Any{&expr.Reject{Type: 2, Code: 0}}})
			return nil
		},
		"chain policy": func(c *gnft.Conn, tb *gnft.Table) error {
			c.AddChain(&gnft.Chain{Name: "output", Table: tb, Type: gnft.ChainTypeFilter,
				Hooknum: gnft.ChainHookOutput, Priority: gnft.ChainPriorityFilter, Policy: &drop})
			return nil
		},
		"element replaced": func(c *gnft.Conn, tb *gnft.Table) error {
			s, err := c.GetSetByName(tb, "allow_ipv4")
			if err != nil {
				return err
			}
			if err := c.SetDeleteElements(s, []gnft.SetElement{{
				Key: key([4]byte{192, 0, 2, 1}, 17, 53), KeyEnd: key([4]byte{192, 0, 2, 1}, 17, 53)}}); err != nil {
				return err
			}
			return c.SetAddElements(s, []gnft.SetElement{{
				Key: key([4]byte{192, 0, 2, 2}, 17, 53), KeyEnd: key([4]byte{192, 0, 2, 2}, 17, 53)}})
		},
		"extra rule": func(c *gnft.Conn, tb *gnft.Table) error {
			c.AddRule(&gnft.Rule{Table: tb, Chain: &gnft.Chain{Name: "ipv6", Table: tb},
				Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
			return nil
		},
		"hooks swapped": func(c *gnft.Conn, tb *gnft.Table) error {
			// The same chains and rules, the base chains' hooks
			// exchanged.
			var rules [][]*gnft.Rule
			names := []string{"output", "input", "ipv4", "ipv6"}
			for _, n := range names {
				r, err := c.GetRules(tb, &gnft.Chain{Name: n, Table: tb})
				if err != nil {
					return err
				}
				rules = append(rules, r)
			}
			s, err := c.GetSetByName(tb, "allow_ipv4")
			if err != nil {
				return err
			}
			elems, err := c.GetSetElements(s)
			if err != nil {
				return err
			}
			c.DelTable(tb)
			c.AddTable(tb)
			chains := []*gnft.Chain{
				{Name: "output", Table: tb, Type: gnft.ChainTypeFilter, Hooknum: gnft.ChainHookInput, Priority: gnft.ChainPriorityFilter, Policy: &accept},
				{Name: "input", Table: tb, Type: gnft.ChainTypeFilter, Hooknum: gnft.ChainHookOutput, Priority: gnft.ChainPriorityFilter, Policy: &accept},
				{Name: "ipv4", Table: tb},
				{Name: "ipv6", Table: tb},
			}
			for _, ch := range chains {
				c.AddChain(ch)
			}
			set := &gnft.Set{Table: tb, Name: s.Name, ID: 1, KeyType: s.KeyType, Interval: true, Concatenation: true}
			if err := c.AddSet(set, nil); err != nil {
				return err
			}
			if err := c.SetAddElements(set, elems); err != nil {
				return err
			}
			for i, ch := range chains {
				for _, r := range rules[i] {
					for _, e := range r.Exprs {
						if l, ok := e.(*expr.Lookup); ok {
							l.SetID = set.ID
						}
					}
					c.AddRule(&gnft.Rule{Table: tb, Chain: ch, Exprs: r.Exprs, UserData: r.UserData})
				}
			}
			return nil
		},
	}
	for name, tamper := range cases {
		t.Run(name, func(t *testing.T) {
			id := "cfront-nft-tampered"
			table, _ := policy.ChainName(id)
			ns := testenv.NewNetNS(t)
			target := engine.Target{NetNS: ns.Path(), ID: id}
			if _, err := nftables.New().Install(target, a); err != nil {
				t.Fatalf("Go install: %v", err)
			}
			if ok, err := NFTVerify(ns.Path(), table, a); err != nil || !ok {
				t.Fatalf("verify before the change: %t, %v; want true", ok, err)
			}
			c := nftConn(t, ns.Path())
			if err := tamper(c, &gnft.Table{Name: table, Family: gnft.TableFamilyINet}); err != nil {
				t.Fatalf("change: %v", err)
			}
			if err := c.Flush(); err != nil {
				t.Fatalf("change: %v", err)
			}
			if ok, err := NFTVerify(ns.Path(), table, a); err != nil || ok {
				t.Errorf("C verify after the change: %t, %v; want false", ok, err)
			}
			if err := nftables.New().Check(target, a); err == nil {
				t.Errorf("Go check passed after the change")
			}
		})
	}
}

// The removal (the hook's poststop in a namespace that outlives the
// container; its batch also takes out an unverified install) deletes the
// table, and succeeds when there is none (deleteTable's AddTable+DelTable).
func TestNFTDelete(t *testing.T) {
	testenv.RequireRoot(t)
	id := "cfront-nft-delete"
	table, _ := policy.ChainName(id)
	ns := testenv.NewNetNS(t)
	target := engine.Target{NetNS: ns.Path(), ID: id}
	a := policy.Allowlist{DNS: addrs("1.1.1.1")}
	n, err := NFTInstall(ns.Path(), table, a)
	if err != nil || n == 0 {
		t.Fatalf("C install: %d, %v", n, err)
	}
	if err := NFTDelete(ns.Path(), table); err != nil {
		t.Fatal(err)
	}
	if err := nftables.New().Check(target, a); !errors.Is(err, engine.ErrNotInstalled) {
		t.Fatalf("Check after the delete: %v; want %v", err, engine.ErrNotInstalled)
	}
	if err := NFTDelete(ns.Path(), table); err != nil {
		t.Fatalf("delete of a missing table: %v", err)
	}
	// And a new install goes in again.
	if n, err := NFTInstall(ns.Path(), table, a); err != nil || n == 0 {
		t.Fatalf("C install after the delete: %d, %v", n, err)
	}
	if err := nftables.New().Check(target, a); err != nil {
		t.Fatal(err)
	}
}
