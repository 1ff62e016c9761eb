// Package workload makes the allowlists the engine benchmarks install.
package workload

import (
	"fmt"
	"net/netip"

	"github.com/sforge-dev/netiso/policy"
)

// Allowlist returns an allowlist of exactly n entries (n >= 2): last, then
// one resolver, then filler endpoints in TEST-NET-1 (192.0.2.0/24, every
// fifth a /16 in 10.0.0.0/8), never contacted. Filler addresses sort
// before 198.51.100.0/24, so a UDP endpoint there given as last is the
// final allow rule an iptables chain checks: the worst case for per-rule
// engines.
func Allowlist(n int, last policy.Endpoint) (policy.Allowlist, error) {
	if n < 2 || n > policy.MaxEntries {
		return policy.Allowlist{}, fmt.Errorf("entries must be between 2 and %d, not %d", policy.MaxEntries, n)
	}
	a := policy.Allowlist{Endpoints: []policy.Endpoint{last}, DNS: []netip.Addr{netip.MustParseAddr("192.0.2.53")}}
	for i := range n - 2 {
		proto := policy.TCP
		if i%3 == 0 {
			proto = policy.UDP
		}
		var e policy.Endpoint
		var err error
		if i%5 == 0 {
			e, err = policy.NewEndpoint(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16), proto, uint16(1000+i))
		} else {
			e, err = policy.HostEndpoint(netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}), proto, uint16(1000+i))
		}
		if err != nil {
			return policy.Allowlist{}, err
		}
		a.Endpoints = append(a.Endpoints, e)
	}
	c, err := a.Canonical()
	if err != nil {
		return policy.Allowlist{}, err
	}
	if got := len(c.Endpoints) + len(c.DNS); got != n {
		return policy.Allowlist{}, fmt.Errorf("made %d entries, want %d", got, n)
	}
	return a, nil
}
