package policy

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestResolverEntriesRoundTrip(t *testing.T) {
	in := "v1;name:judge.local=10.0.0.12;tcp:10.0.0.12:8080;name:api.example.com=198.51.100.8;resolver:127.0.0.53;name:api.example.com=198.51.100.7"
	a, err := Decode(in)
	if err != nil {
		t.Fatal(err)
	}
	if a.Resolver != DefaultResolver || len(a.Names) != 3 {
		t.Fatalf("decoded %+v", a)
	}
	got := a.Lookup("api.example.com")
	if len(got) != 2 || got[0] != netip.MustParseAddr("198.51.100.7") || got[1] != netip.MustParseAddr("198.51.100.8") {
		t.Fatalf("lookup %v", got)
	}
	if a.Lookup("github.com") != nil {
		t.Fatal("an unpinned name has no address")
	}
	c, err := Encode(a)
	want := "v1;tcp:10.0.0.12:8080;resolver:127.0.0.53;name:api.example.com=198.51.100.7;name:api.example.com=198.51.100.8;name:judge.local=10.0.0.12"
	if err != nil || c != want {
		t.Fatalf("canonical %q (%v), want %q", c, err, want)
	}
	// The rules do not depend on the resolver: it is on loopback.
	plain, _ := Decode("v1;tcp:10.0.0.12:8080")
	r1, _ := Rules(a)
	r2, _ := Rules(plain)
	if !reflect.DeepEqual(r1, r2) {
		t.Fatalf("rules differ:\n%+v\n%+v", r1, r2)
	}
	if a.Equal(plain) {
		t.Fatal("an allowlist with a resolver is not the one without")
	}
}

func TestResolverEntriesRejected(t *testing.T) {
	for in, want := range map[string]string{
		"v1;name:judge.local=10.0.0.12":                                       "there is none",
		"v1;resolver:10.0.0.1":                                                "loopback",
		"v1;resolver:127.0.0.11":                                              "Docker's embedded resolver",
		"v1;resolver:::1":                                                     "loopback",
		"v1;resolver:127.0.0.53;resolver:127.0.0.54":                          "already set",
		"v1;resolver:127.0.0.53;name:Judge=10.0.0.1":                          `has 'J'`,
		"v1;resolver:127.0.0.53;name:a_b=10.0.0.1":                            `has '_'`,
		"v1;resolver:127.0.0.53;name:a..b=10.0.0.1":                           "empty label",
		"v1;resolver:127.0.0.53;name:-a=10.0.0.1":                             "starts or ends",
		"v1;resolver:127.0.0.53;name:a=::1":                                   "IPv4",
		"v1;resolver:127.0.0.53;name:a":                                       "NAME=IPV4ADDRESS",
		"v1;resolver:127.0.0.53;name:a=1.2.3.4;name:a=1.2.3.4":                "duplicates entry 2",
		"v1;resolver:127.0.0.53;name:" + strings.Repeat("a", 64) + "=1.2.3.4": "longer than 63",
		"v1;dns:127.0.0.53;resolver:127.0.0.53":                               "also listed",
	} {
		_, err := Decode(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}

func TestPinNames(t *testing.T) {
	got := PinNames(map[string][]netip.Addr{
		"Judge.Local.": {netip.MustParseAddr("10.0.0.12"), netip.MustParseAddr("2001:db8::1")},
		"under_score":  {netip.MustParseAddr("10.0.0.13")},
		"10.0.0.14":    {netip.MustParseAddr("10.0.0.14")},
		"api.example":  {netip.MustParseAddr("::ffff:198.51.100.7")},
	})
	a, err := Allowlist{Resolver: DefaultResolver, Names: got}.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Names) != 2 || a.Names[0].String() != "api.example=198.51.100.7" || a.Names[1].String() != "judge.local=10.0.0.12" {
		t.Fatalf("pinned %v", a.Names)
	}
}
