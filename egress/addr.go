package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/sforge-dev/netiso/policy"
)

// SplitAuthority splits a CONNECT target or a Host header (host:port, or
// host with defaultPort) into a lower-case host without brackets or final
// dot, and a port.
func SplitAuthority(authority string, defaultPort uint16) (string, uint16, error) {
	if authority == "" {
		return "", 0, fmt.Errorf("empty host")
	}
	host, portStr, err := net.SplitHostPort(authority)
	if err != nil {
		if defaultPort == 0 || strings.Count(authority, ":") == 1 && !strings.HasPrefix(authority, "[") {
			return "", 0, fmt.Errorf("host %q: want HOST:PORT", authority)
		}
		host, portStr = strings.TrimSuffix(strings.TrimPrefix(authority, "["), "]"), strconv.Itoa(int(defaultPort))
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return "", 0, fmt.Errorf("host %q: port %q is not 1-65535", authority, portStr)
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", 0, fmt.Errorf("host %q: empty name", authority)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", 0, fmt.Errorf("host %q: an address with a zone cannot be a destination", authority)
		}
		return a.Unmap().String(), uint16(port), nil
	}
	if err := policy.CheckHost(host); err != nil {
		return "", 0, fmt.Errorf("host %q: %v", authority, err)
	}
	return host, uint16(port), nil
}

// alwaysRefused are ranges a listed name may not resolve into unless the
// address is on the allowlist itself: this host and its neighbours, seen
// from the proxy (DNS rebinding into the host).
var alwaysRefused = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, the metadata address
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("255.255.255.255/32"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("64:ff9b::/96"),
}

// HostNetworks are the networks of this host's interfaces, which a listed
// name may not resolve into (the Docker bridge, the LAN), unless listed.
func HostNetworks() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("failed to list this host's addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		bits, _ := n.Mask.Size()
		ip = ip.Unmap()
		if ip.Is4() && bits > 32 {
			bits -= 96
		}
		out = append(out, netip.PrefixFrom(ip, bits).Masked())
	}
	return out, nil
}

// refusal is why a destination is refused, as logged and counted.
type refusal struct{ reason string }

func (r *refusal) Error() string { return r.reason }

func refusedf(format string, args ...any) error {
	return &refusal{reason: fmt.Sprintf(format, args...)}
}

// destinations decides a host:port: a listed name (resolved now, so that
// rotation does not matter) or an IP literal on the allowlist. It returns
// the addresses that may be dialled.
func (p *Proxy) destinations(ctx context.Context, host string, port uint16) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		if !p.listedAddr(a, port) {
			return nil, refusedf("%s is an IP address that is not on the allowlist; use a listed name", host)
		}
		return []netip.Addr{a}, nil
	}
	if pinned, ok := p.c.Pinned[host]; ok {
		var out []netip.Addr
		for _, a := range pinned {
			if p.listedAddr(a, port) {
				out = append(out, a)
			}
		}
		if len(out) == 0 {
			return nil, refusedf("%s is on the allowlist, but not at port %d", host, port)
		}
		return out, nil
	}
	if !policy.MatchDomain(p.c.Allow, host) {
		return nil, refusedf("%s is not on the domain allowlist", host)
	}
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	addrs, err := p.c.Resolver.LookupNetIP(rctx, "ip", host)
	if err != nil {
		return nil, refusedf("%s does not resolve: %v", host, err)
	}
	var ok2 []netip.Addr
	var bad []string
	for _, a := range addrs {
		a = a.Unmap()
		if p.refusedAddr(a) && !p.listedAddr(a, port) {
			bad = append(bad, a.String())
			continue
		}
		ok2 = append(ok2, a)
	}
	if len(ok2) == 0 {
		return nil, refusedf("%s resolves only to addresses of this host or its networks (%s), which are refused unless on the allowlist", host, strings.Join(bad, ", "))
	}
	return ok2, nil
}

func (p *Proxy) refusedAddr(a netip.Addr) bool {
	in := func(n netip.Prefix) bool { return n.Contains(a) }
	return slices.ContainsFunc(alwaysRefused, in) || slices.ContainsFunc(p.c.RefuseNets, in)
}

func (p *Proxy) listedAddr(a netip.Addr, port uint16) bool {
	for _, e := range p.c.AllowAddrs {
		if e.Proto == policy.TCP && e.Port == port && e.Prefix.Contains(a) {
			return true
		}
	}
	return false
}

// ParseResolve reads --resolve NAME=ADDRESS entries (as curl's) into the
// proxy's fixed answers; flag names them in errors.
func ParseResolve(flag string, list []string) (map[string][]netip.Addr, error) {
	out := map[string][]netip.Addr{}
	for _, kv := range list {
		name, addr, ok := strings.Cut(kv, "=")
		a, err := netip.ParseAddr(addr)
		name = strings.TrimSuffix(strings.ToLower(name), ".")
		if !ok || err != nil || policy.CheckHost(name) != nil || a.Zone() != "" {
			return nil, fmt.Errorf("%s %q: want NAME=ADDRESS, e.g. %s docs.example.com=203.0.113.7", flag, kv, flag)
		}
		out[name] = append(out[name], a.Unmap())
	}
	return out, nil
}
