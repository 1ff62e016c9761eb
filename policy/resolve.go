package policy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Resolver looks up the addresses of a host. *net.Resolver implements it;
// tests inject a fake.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// FixedResolver answers the names of Fixed (lower case, without a final
// dot: --resolve NAME=ADDRESS, a backend's host.docker.internal) itself
// and asks Next for any other.
type FixedResolver struct {
	Fixed map[string][]netip.Addr
	Next  Resolver
}

// LookupNetIP implements Resolver.
func (r FixedResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := r.Fixed[strings.TrimSuffix(strings.ToLower(host), ".")]; ok {
		return a, nil
	}
	if r.Next == nil {
		return nil, fmt.Errorf("no resolver for %s", host)
	}
	return r.Next.LookupNetIP(ctx, network, host)
}

// DefaultResolveTimeout bounds the lookup of all targets together.
const DefaultResolveTimeout = 5 * time.Second

// ResolveError reports a target whose host cannot be turned into IPv4
// addresses.
type ResolveError struct {
	Target Target
	Reason string
	Err    error
}

func (e *ResolveError) Error() string {
	return fmt.Sprintf("%s: cannot resolve %s: %s", e.Target.Source, e.Target.Host, e.Reason)
}

func (e *ResolveError) Unwrap() error { return e.Err }

// Resolve turns targets into TCP endpoints: IP literals as they are,
// hostnames into every IPv4 address they have, looked up once, here, so that
// the sandbox itself needs no DNS. The whole lookup is bounded by timeout
// (DefaultResolveTimeout when zero). Resolved maps each hostname to its
// addresses, for pinning them in the container's /etc/hosts.
func Resolve(ctx context.Context, r Resolver, timeout time.Duration, targets ...Target) (endpoints []Endpoint, resolved map[string][]netip.Addr, err error) {
	if timeout <= 0 {
		timeout = DefaultResolveTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resolved = map[string][]netip.Addr{}
	for _, t := range targets {
		addrs, err := resolveHost(ctx, r, t)
		if err != nil {
			return nil, nil, err
		}
		if _, lit := parseIPv4(t.Host); !lit {
			resolved[t.Host] = addrs
		}
		for _, a := range addrs {
			ep, err := HostEndpoint(a, TCP, t.Port)
			if err != nil {
				return nil, nil, &ResolveError{Target: t, Reason: err.Error(), Err: err}
			}
			endpoints = append(endpoints, ep)
		}
	}
	slices.SortFunc(endpoints, compareEndpoints)
	return slices.Compact(endpoints), resolved, nil
}

func parseIPv4(host string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false
	}
	return a, true
}

func resolveHost(ctx context.Context, r Resolver, t Target) ([]netip.Addr, error) {
	if a, ok := parseIPv4(t.Host); ok {
		return []netip.Addr{a}, nil
	}
	if r == nil {
		return nil, &ResolveError{Target: t, Reason: "no resolver configured"}
	}
	// Ask for every family so that an IPv6-only name gets its own message.
	addrs, err := r.LookupNetIP(ctx, "ip", t.Host)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &ResolveError{Target: t, Reason: "lookup timed out; check the host's DNS or use an IPv4 address in the URL", Err: err}
		}
		return nil, &ResolveError{Target: t, Reason: fmt.Sprintf("%v; check the name or use an IPv4 address in the URL", err), Err: err}
	}
	var v4 []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() {
			v4 = append(v4, a)
		}
	}
	if len(v4) == 0 {
		return nil, &ResolveError{Target: t, Reason: "it has no IPv4 address and IPv6 is blocked inside the sandbox; use a name with an A record, an IPv4 address, or a `sforge proxy` reachable over IPv4"}
	}
	slices.SortFunc(v4, netip.Addr.Compare)
	return slices.Compact(v4), nil
}
