package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"
)

// A container can be given sforge's resolver (see package resolver): a
// DNS server on an address of its own loopback that answers the names the
// allowlist pins, with the pinned addresses, and refuses — and records —
// every other name, forwarding nothing. It is what makes "which names did
// the agent try" answerable when the container may not use DNS.
//
// In the encoded value it is a "resolver:" entry with the loopback address
// it listens on (port 53), and one "name:NAME=ADDRESS" entry per pinned
// address:
//
//	v1;tcp:10.0.0.12:8080;resolver:127.0.0.53;name:judge.local=10.0.0.12

// DefaultResolver is where sforge run puts the container's resolver: a
// loopback address that Docker's embedded resolver (127.0.0.11) and the
// resolv.conf of the image do not use.
var DefaultResolver = netip.AddrFrom4([4]byte{127, 0, 0, 53})

// NoResolver is the nameserver of a sandbox given no resolver at all
// (Kubernetes requires one with dnsPolicy None): on the sandbox's own
// loopback nothing answers there, so a lookup fails at once.
var NoResolver = netip.AddrFrom4([4]byte{127, 0, 0, 1})

// Name is one address the container's resolver gives for a name.
type Name struct {
	Host string
	Addr netip.Addr
}

func (n Name) String() string { return n.Host + "=" + n.Addr.String() }

func compareNames(a, b Name) int {
	return cmp.Or(cmp.Compare(a.Host, b.Host), a.Addr.Compare(b.Addr))
}

// MaxHostLength is the longest name in presentation form without the
// final dot (RFC 1035's 255 octets on the wire).
const MaxHostLength = 253

// CheckHost validates a pinned name: letters, digits and hyphens in labels
// of 1 to 63 characters that neither start nor end with a hyphen, at most
// MaxHostLength in all, no final dot, lower case.
func CheckHost(h string) error {
	if h == "" {
		return fmt.Errorf("empty name")
	}
	if len(h) > MaxHostLength {
		return fmt.Errorf("name is %d characters, more than %d", len(h), MaxHostLength)
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" {
			return fmt.Errorf("name %q has an empty label", h)
		}
		if len(label) > 63 {
			return fmt.Errorf("name %q has a label longer than 63 characters", h)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("name %q has a label that starts or ends with '-'", h)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return fmt.Errorf("name %q has %q (want lower-case letters, digits, '-' and '.')", h, c)
			}
		}
	}
	return nil
}

// checkResolver validates the resolver's address: IPv4 loopback, not
// Docker's embedded resolver.
func checkResolver(a netip.Addr) error {
	if !a.Is4() || !a.IsLoopback() {
		return fmt.Errorf("resolver %s: want an IPv4 loopback address (127.0.0.0/8)", a)
	}
	if a == DockerEmbeddedDNS {
		return fmt.Errorf("resolver %s: that is Docker's embedded resolver; choose another loopback address such as %s", a, DefaultResolver)
	}
	return nil
}

// parseNameEntry parses "NAME=ADDRESS".
func parseNameEntry(s string) (Name, error) {
	h, addrText, ok := strings.Cut(s, "=")
	if !ok {
		return Name{}, fmt.Errorf("want name:NAME=IPV4ADDRESS")
	}
	if err := CheckHost(h); err != nil {
		return Name{}, err
	}
	a, err := netip.ParseAddr(addrText)
	if err != nil || !a.Is4() {
		return Name{}, fmt.Errorf("invalid IPv4 address %q", addrText)
	}
	return Name{Host: h, Addr: a}, nil
}

// Lookup returns the addresses the resolver gives for host (lower case,
// no final dot); nil when the name is not pinned.
func (a Allowlist) Lookup(host string) []netip.Addr {
	var out []netip.Addr
	for _, n := range a.Names {
		if n.Host == host {
			out = append(out, n.Addr)
		}
	}
	return out
}

// PinNames returns the names to pin for hosts (name to addresses, as
// resolved for /etc/hosts): IPv4 addresses of the names CheckHost accepts
// once lower-cased (others stay in /etc/hosts only), in no order.
func PinNames(hosts map[string][]netip.Addr) []Name {
	var out []Name
	for h, addrs := range hosts {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if _, err := netip.ParseAddr(h); err == nil || CheckHost(h) != nil {
			continue
		}
		for _, a := range addrs {
			if a = a.Unmap(); a.Is4() {
				out = append(out, Name{Host: h, Addr: a})
			}
		}
	}
	return out
}
