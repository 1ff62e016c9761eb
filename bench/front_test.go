package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sforge-dev/netiso/bench/internal/timing"
	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/nftables"
	"github.com/sforge-dev/netiso/internal/cfront/cfronttest"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/policy"
)

// BenchmarkFrontInstall: the C fronts' install (internal/cfront/nft.h) of
// 4 and 256 entries into a namespace without our table, in-process: the
// batch, the kernel's echo of it and the comparison with the plan, as a
// front runs it. Baselines in the same run: the same install followed by a
// read-back with dumps (the check the fronts made before they compared the
// echoes: the tests' read-back, 4 dumps, where the fronts sent 7), and the
// Go engine's install (its batch and its read-back). And the C install
// whose netlink socket a child opens, as for a rootless engine's hook,
// whose thread could not come back from the container's namespace
// (cf_nft_socket_by_child). After each install
// the table is deleted, untimed, so each starts from the same namespace.
//
// A second namespace holds a table of ours throughout, so that the kernel's
// connection-tracking hooks stay in use: as they are while any isolated
// container runs. Without it, each delete here would turn their static
// keys off and each install on again (about 1.3 ms on this kind of
// machine, where the host tracks no IPv6 connections), which would hide
// what is compared.
func BenchmarkFrontInstall(b *testing.B) {
	testenv.RequireRoot(b)
	keep := testenv.NewNetNS(b)
	if _, err := nftables.New().Install(engine.Target{NetNS: keep.Path(), ID: "bench-front-keep"}, allowlist(b, 4)); err != nil {
		b.Fatalf("the table that keeps the hooks in use: %v", err)
	}
	n := testenv.NewNetNS(b)
	const id = "bench-front"
	table, err := policy.ChainName(id)
	if err != nil {
		b.Fatal(err)
	}
	tg := engine.Target{NetNS: n.Path(), ID: id}
	install := func(a policy.Allowlist) error {
		got, err := cfronttest.NFTInstall(n.Path(), table, a)
		if err == nil && got == 0 {
			err = fmt.Errorf("the C left the install to Go")
		}
		return err
	}
	type contender struct {
		name string
		run  func(policy.Allowlist) error
	}
	contenders := []contender{
		{"C, echoes", install},
		{"C, echoes + dumps", func(a policy.Allowlist) error {
			if err := install(a); err != nil {
				return err
			}
			ok, err := cfronttest.NFTVerify(n.Path(), table, a)
			if err == nil && !ok {
				err = fmt.Errorf("the read-back differs from the plan")
			}
			return err
		}},
		{"Go engine", func(a policy.Allowlist) error {
			_, err := nftables.New().Install(tg, a)
			return err
		}},
		{"C by a child", func(a policy.Allowlist) error {
			got, err := cfronttest.NFTInstallByChild(n.Path(), table, a)
			if err == nil && got == 0 {
				err = fmt.Errorf("the C left the install to Go")
			}
			return err
		}},
	}
	sizes := []int{4, 256}
	lists := map[int]policy.Allowlist{}
	for _, size := range sizes {
		lists[size] = allowlist(b, size)
	}
	res := map[string]map[int]timing.Samples{}
	for _, c := range contenders {
		res[c.name] = map[int]timing.Samples{}
	}
	r := rounds(101)
	b.ResetTimer()
	for range b.N {
		interleaved(r, sizes, len(contenders), func(size, k int) {
			c := contenders[k]
			start := time.Now()
			if err := c.run(lists[size]); err != nil {
				b.Fatalf("%s, %d entries: %v", c.name, size, err)
			}
			res[c.name][size] = append(res[c.name][size], time.Since(start))
			if err := cfronttest.NFTDelete(n.Path(), table); err != nil {
				b.Fatalf("delete after %s: %v", c.name, err)
			}
		})
	}
	b.StopTimer()

	var out strings.Builder
	fmt.Fprintf(&out, "\nC front install, in-process, %d rounds interleaved (ms, median / p95)\n", r)
	fmt.Fprintf(&out, "%-8s %-19s %-19s %-19s %-19s | %-14s %-10s %-12s\n", "entries", "C, echoes", "C, echoes + dumps", "Go engine", "C by a child",
		"dumps/echoes", "Go/echoes", "child/echoes")
	for _, size := range sizes {
		mp := func(s timing.Samples) string { return timing.Ms(s.Median()) + " / " + timing.Ms(s.P95()) }
		e, d, g, c := res["C, echoes"][size], res["C, echoes + dumps"][size], res["Go engine"][size], res["C by a child"][size]
		fmt.Fprintf(&out, "%-8d %-19s %-19s %-19s %-19s | %-14.2f %-10.2f %-12.2f\n", size, mp(e), mp(d), mp(g), mp(c),
			timing.Ratio(d, e), timing.Ratio(g, e), timing.Ratio(c, e))
	}
	fmt.Print(out.String())
	b.ReportMetric(float64(res["C, echoes"][4].Median())/1e6, "c-4-ms")
	b.ReportMetric(timing.Ratio(res["C, echoes + dumps"][4], res["C, echoes"][4]), "dumps/echoes-4")
	b.ReportMetric(timing.Ratio(res["C by a child"][4], res["C, echoes"][4]), "child/echoes-4")
}
