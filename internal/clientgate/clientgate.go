// Package clientgate decides which clients may use a proxy that sforge
// serves to a workload (the API proxy, the egress proxy): those of the
// allowed networks, and, once the workload's own addresses are known, only
// the workload, not its neighbours on the same network.
package clientgate

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// AdmitTimeout bounds how long a client waits for the workload's
// addresses.
const AdmitTimeout = 30 * time.Second

// NotOnNetworks is the refusal of a client outside the allowed networks.
const NotOnNetworks = "not on the allowed networks"

// Gate is the client check. Its zero value admits nobody.
type Gate struct {
	allow []netip.Prefix
	await bool

	once     sync.Once
	admitted chan struct{}
	mu       sync.Mutex
	only     []netip.Addr
}

// New admits clients of allow; with awaitWorkload, only those that Admit
// names, and a client that comes before Admit waits for it.
func New(allow []netip.Prefix, awaitWorkload bool) *Gate {
	return &Gate{allow: allow, await: awaitWorkload, admitted: make(chan struct{})}
}

// Admit names the workload's addresses. Only the first call counts;
// calling it with none admits nobody.
func (g *Gate) Admit(addrs ...netip.Addr) {
	g.once.Do(func() {
		g.mu.Lock()
		for _, a := range addrs {
			g.only = append(g.only, a.Unmap().WithZone(""))
		}
		g.mu.Unlock()
		close(g.admitted)
	})
}

// Refused says why the client at remote (host:port) may not use the proxy,
// "" when it may. It waits for Admit, at most AdmitTimeout or until ctx
// ends, when the gate awaits the workload.
func (g *Gate) Refused(ctx context.Context, remote string) string {
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return NotOnNetworks
	}
	a := ap.Addr().Unmap().WithZone("")
	if !slices.ContainsFunc(g.allow, func(n netip.Prefix) bool { return n.Contains(a) }) {
		return NotOnNetworks
	}
	if !g.await {
		return ""
	}
	t := time.NewTimer(AdmitTimeout)
	defer t.Stop()
	select {
	case <-g.admitted:
	case <-ctx.Done():
		return "gone before the workload's address was known"
	case <-t.C:
		return "the workload's address is not known"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !slices.Contains(g.only, a) {
		return "not the workload's address"
	}
	return ""
}
