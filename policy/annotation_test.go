package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestDecodeCanonical(t *testing.T) {
	tests := []struct {
		in, canonical string
	}{
		{"v1", "v1"},
		{"v1;tcp:10.0.0.12:8080", "v1;tcp:10.0.0.12:8080"},
		{"v1;tcp:10.0.0.12/32:8080", "v1;tcp:10.0.0.12:8080"},
		{"v1;else:reject", "v1"},
		{"v1;else:drop", "v1;else:drop"},
		{"v1;dns:10.96.0.10;udp:10.0.0.5:4000;tcp:104.18.0.0/16:443;tcp:10.0.0.12:8080;else:drop",
			"v1;tcp:10.0.0.12:8080;tcp:104.18.0.0/16:443;udp:10.0.0.5:4000;dns:10.96.0.10;else:drop"},
		{"v1;tcp:10.0.0.0/8:443;tcp:10.0.0.0/16:443;tcp:10.0.0.0/8:80", "v1;tcp:10.0.0.0/8:80;tcp:10.0.0.0/8:443;tcp:10.0.0.0/16:443"},
		{"v1;dns:127.0.0.11;dns:10.0.0.2", "v1;dns:10.0.0.2;dns:127.0.0.11"},
		{"v1;tcp:0.0.0.0/0:443", "v1;tcp:0.0.0.0/0:443"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			a, err := Decode(tt.in)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			got, err := Encode(a)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if got != tt.canonical {
				t.Fatalf("Encode(Decode(%q)) = %q, want %q", tt.in, got, tt.canonical)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	many := "v1"
	for i := 0; i <= MaxEntries; i++ {
		many += fmt.Sprintf(";tcp:10.0.%d.%d:80", i/256, i%256)
	}
	tests := []struct {
		in   string
		want string
	}{
		{"", "empty"},
		{"v2;tcp:1.2.3.4:80", `unsupported version "v2"`},
		{"tcp:1.2.3.4:80", `must start with "v1"`},
		{"V1", `must start with "v1"`},
		{"v1;", `entry 1 "": empty entry`},
		{"v1;tcp:1.2.3.4:80;", `entry 2 "": empty entry`},
		{"v1;;tcp:1.2.3.4:80", `entry 1 "": empty entry`},
		{"v1;tcp", `entry 1 "tcp": want KIND:VALUE`},
		{"v1;icmp:1.2.3.4:0", `unknown kind "icmp"`},
		{"v1;TCP:1.2.3.4:80", `unknown kind "TCP"`},
		{"v1;tcp:1.2.3.4", "want tcp:ADDRESS[/BITS]:PORT"},
		{"v1;tcp:1.2.3:80", `invalid IPv4 address "1.2.3"`},
		{"v1;tcp:example.com:80", `invalid IPv4 address "example.com"`},
		{"v1;tcp:10.0.0.1/8:80", "host bits set (did you mean 10.0.0.0/8?)"},
		{"v1;tcp:10.0.0.0/33:80", `invalid IPv4 network "10.0.0.0/33"`},
		{"v1;tcp:1.2.3.4:0", `invalid port "0"`},
		{"v1;tcp:1.2.3.4:65536", `invalid port "65536"`},
		{"v1;tcp:1.2.3.4:080", `invalid port "080"`},
		{"v1;tcp:1.2.3.4:+80", `invalid port "+80"`},
		{"v1;tcp:1.2.3.4:80:90", `invalid port "80:90"`},
		{"v1;tcp:::1:80", "invalid IPv4 address"},
		{"v1;tcp:::ffff:1.2.3.4:80", "invalid IPv4 address"},
		{"v1;udp:1.2.3.4: 53", `invalid port " 53"`},
		{"v1;dns:2001:db8::1", "want an IPv4 resolver"},
		{"v1;dns:", "want an IPv4 resolver"},
		{"v1;else:allow", `unknown action "allow"`},
		{"v1;else:drop;else:reject", `entry 2 "else:reject": the action is already set`},
		{"v1;tcp:1.2.3.4:80;tcp:1.2.3.4:80", `entry 2 "tcp:1.2.3.4:80": duplicates entry 1`},
		{"v1;tcp:1.2.3.4:80;tcp:1.2.3.4/32:80", "duplicates entry 1"},
		{"v1;dns:1.1.1.1;dns:1.1.1.1", "duplicates entry 1"},
		{"v1; tcp:1.2.3.4:80", `unknown kind " tcp"`},
		{many, fmt.Sprintf("%d entries, more than the limit of %d", MaxEntries+1, MaxEntries)},
		{"v1;" + strings.Repeat("x", MaxValueBytes), "more than the limit of 16384"},
	}
	for _, tt := range tests {
		name := tt.in
		if len(name) > 60 {
			name = name[:60]
		}
		t.Run(name, func(t *testing.T) {
			a, err := Decode(tt.in)
			if err == nil {
				t.Fatalf("Decode(%q) = %+v, want error containing %q", tt.in, a, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "invalid sforge.io/egress value: ") {
				t.Fatalf("error %q does not name the annotation", err)
			}
			var ae *AnnotationError
			if !errors.As(err, &ae) {
				t.Fatalf("error %T is not an *AnnotationError", err)
			}
		})
	}
}

func TestDecodeAtLimits(t *testing.T) {
	v := "v1"
	for i := 0; i < MaxEntries; i++ {
		v += fmt.Sprintf(";tcp:10.0.%d.%d:80", i/256, i%256)
	}
	a, err := Decode(v)
	if err != nil {
		t.Fatalf("%d entries must be accepted: %v", MaxEntries, err)
	}
	if len(a.Endpoints) != MaxEntries {
		t.Fatalf("got %d endpoints", len(a.Endpoints))
	}
}

func TestEncodeRejectsInvalid(t *testing.T) {
	tests := []struct {
		a    Allowlist
		want string
	}{
		{Allowlist{Endpoints: []Endpoint{{Prefix: netip.MustParsePrefix("2001:db8::/64"), Proto: TCP, Port: 1}}}, "not IPv4"},
		{Allowlist{Endpoints: []Endpoint{{Prefix: netip.MustParsePrefix("10.0.0.1/32"), Proto: "sctp", Port: 1}}}, `unknown protocol "sctp"`},
		{Allowlist{Endpoints: []Endpoint{{Prefix: netip.MustParsePrefix("10.0.0.1/32"), Proto: TCP}}}, "port 0"},
		{Allowlist{Endpoints: []Endpoint{{Proto: TCP, Port: 1}}}, "invalid address"},
		{Allowlist{DNS: []netip.Addr{netip.MustParseAddr("::1")}}, "not an IPv4"},
		{Allowlist{Action: "allow"}, `unknown action "allow"`},
	}
	for _, tt := range tests {
		_, err := Encode(tt.a)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Encode(%+v) error = %v, want %q", tt.a, err, tt.want)
		}
	}
	var big Allowlist
	for i := 0; i <= MaxEntries; i++ {
		big.DNS = append(big.DNS, netip.AddrFrom4([4]byte{10, 1, byte(i / 256), byte(i % 256)}))
	}
	if _, err := Encode(big); err == nil || !strings.Contains(err.Error(), "more than the limit of 256") {
		t.Errorf("Encode(257 entries) error = %v", err)
	}
}

func TestEncodeDeduplicates(t *testing.T) {
	e := must(HostEndpoint(netip.MustParseAddr("::ffff:10.0.0.1"), TCP, 80))
	got, err := Encode(Allowlist{Endpoints: []Endpoint{e, e}, DNS: []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.2")}})
	if err != nil {
		t.Fatal(err)
	}
	if got != "v1;tcp:10.0.0.1:80;dns:10.0.0.2" {
		t.Fatalf("got %q", got)
	}
}

func TestLookup(t *testing.T) {
	tests := []struct {
		name  string
		ann   map[string]string
		env   []string
		value string
		found bool
		err   string
	}{
		{name: "none", env: []string{"PATH=/bin"}},
		{name: "annotation", ann: map[string]string{AnnotationKey: "v1"}, value: "v1", found: true},
		{name: "annotation beats env", ann: map[string]string{AnnotationKey: "v1"}, env: []string{"SFORGE_EGRESS=v1;else:drop"}, value: "v1", found: true},
		{name: "env", env: []string{"PATH=/bin", "SFORGE_EGRESS=v1;else:drop"}, value: "v1;else:drop", found: true},
		{name: "env empty value still isolates", env: []string{"SFORGE_EGRESS="}, value: "", found: true},
		{name: "env twice same", env: []string{"SFORGE_EGRESS=v1", "SFORGE_EGRESS=v1"}, value: "v1", found: true},
		{name: "env twice different", env: []string{"SFORGE_EGRESS=v1", "SFORGE_EGRESS=v1;else:drop"}, found: true, err: "set more than once"},
		{name: "prefix only", env: []string{"SFORGE_EGRESSX=v1", "XSFORGE_EGRESS=v1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, found, err := Lookup(tt.ann, tt.env)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if found != tt.found || (tt.err == "" && v != tt.value) {
				t.Fatalf("Lookup = %q, %v; want %q, %v", v, found, tt.value, tt.found)
			}
		})
	}
}

func TestAssignments(t *testing.T) {
	if got := EnvAssignment("v1"); got != "SFORGE_EGRESS=v1" {
		t.Error(got)
	}
	if got := AnnotationAssignment("v1"); got != "sforge.io/egress=v1" {
		t.Error(got)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
