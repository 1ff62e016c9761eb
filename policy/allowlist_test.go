package policy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseProtocolAndAction(t *testing.T) {
	for _, s := range []string{"tcp", "udp"} {
		if p, err := ParseProtocol(s); err != nil || string(p) != s {
			t.Errorf("ParseProtocol(%q) = %q, %v", s, p, err)
		}
	}
	for _, s := range []string{"", "TCP", "icmp", "sctp"} {
		if _, err := ParseProtocol(s); err == nil || !strings.Contains(err.Error(), "allowed: tcp, udp") {
			t.Errorf("ParseProtocol(%q) error = %v", s, err)
		}
	}
	for _, s := range []string{"reject", "drop"} {
		if a, err := ParseAction(s); err != nil || string(a) != s {
			t.Errorf("ParseAction(%q) = %q, %v", s, a, err)
		}
	}
	for _, s := range []string{"", "accept", "DROP"} {
		if _, err := ParseAction(s); err == nil || !strings.Contains(err.Error(), "allowed: reject, drop") {
			t.Errorf("ParseAction(%q) error = %v", s, err)
		}
	}
}

func TestNewEndpoint(t *testing.T) {
	tests := []struct {
		prefix string
		proto  Protocol
		port   uint16
		want   string
		err    string
	}{
		{prefix: "10.0.0.1/32", proto: TCP, port: 80, want: "tcp:10.0.0.1:80"},
		{prefix: "10.0.0.0/8", proto: UDP, port: 53, want: "udp:10.0.0.0/8:53"},
		{prefix: "::ffff:10.0.0.1/128", proto: TCP, port: 80, want: "tcp:10.0.0.1:80"},
		{prefix: "::ffff:10.0.0.0/104", proto: TCP, port: 80, want: "tcp:10.0.0.0/8:80"},
		{prefix: "0.0.0.0/0", proto: TCP, port: 443, want: "tcp:0.0.0.0/0:443"},
		{prefix: "10.0.0.1/8", proto: TCP, port: 80, err: "host bits set (did you mean 10.0.0.0/8?)"},
		{prefix: "2001:db8::/32", proto: TCP, port: 80, err: "not IPv4"},
		{prefix: "10.0.0.1/32", proto: "icmp", port: 80, err: "unknown protocol"},
		{prefix: "10.0.0.1/32", proto: TCP, port: 0, err: "port 0"},
	}
	for _, tt := range tests {
		t.Run(tt.prefix, func(t *testing.T) {
			e, err := NewEndpoint(netip.MustParsePrefix(tt.prefix), tt.proto, tt.port)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || e.String() != tt.want {
				t.Fatalf("NewEndpoint = %v, %v; want %s", e, err, tt.want)
			}
		})
	}
	if _, err := NewEndpoint(netip.Prefix{}, TCP, 1); err == nil {
		t.Error("the zero prefix must be refused")
	}
}

func TestCanonicalAndEqual(t *testing.T) {
	a := must(Decode("v1;tcp:10.0.0.12:8080;dns:10.0.0.2"))
	b := Allowlist{
		Endpoints: []Endpoint{a.Endpoints[0], a.Endpoints[0]},
		DNS:       []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.2")},
		Action:    "",
	}
	if !a.Equal(b) {
		t.Fatalf("%+v and %+v allow the same traffic", a, b)
	}
	c, err := b.Canonical()
	if err != nil || c.Action != Reject || len(c.Endpoints) != 1 || len(c.DNS) != 1 {
		t.Fatalf("Canonical = %+v, %v", c, err)
	}
	if a.Equal(Allowlist{Endpoints: a.Endpoints, DNS: a.DNS, Action: Drop}) {
		t.Fatal("a different action is a different allowlist")
	}
	if a.Equal(Allowlist{Action: "bogus"}) {
		t.Fatal("an invalid allowlist equals nothing")
	}
	if !a.AllowsDNS(netip.MustParseAddr("10.0.0.2")) || a.AllowsDNS(DockerEmbeddedDNS) {
		t.Fatal("AllowsDNS")
	}
}
