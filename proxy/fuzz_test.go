package proxy

import (
	"errors"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/policy"
)

// FuzzParseTarget: --target never panics; an accepted URL is http(s) with a
// host and no credentials, query or fragment, and re-parses to itself.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{
		"https://api.anthropic.com", "http://10.0.0.5:8080/gateway/anthropic/", "http://[2001:db8::1]:8080",
		"https://u:p@a", "https://a/?key=1", "https://a#f", "ftp://a", "https://a:0", "https://a:", "http://%zz",
		"https://a/%2F%zz", "https:opaque", "https://a:99999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := ParseTarget("--target", raw)
		if err != nil {
			var ue *policy.URLError
			if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "--target ") {
				t.Fatalf("error %T %q is not a *policy.URLError naming the flag", err, err)
			}
			return
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			t.Fatalf("accepted %q as %#v", raw, u)
		}
		again, err := ParseTarget("--target", u.String())
		if err != nil || again.String() != u.String() {
			t.Fatalf("%q -> %s does not round-trip: %v, %v", raw, u, again, err)
		}
	})
}

// FuzzParseAllowFrom: --allow-from never panics; accepted prefixes are
// valid, masked and without zone, and print back to themselves.
func FuzzParseAllowFrom(f *testing.F) {
	for _, s := range []string{
		"172.17.0.0/16", "127.0.0.1", "::1", "0.0.0.0/0", "::ffff:10.0.0.0/104", "172.17.0.1/16",
		"fe80::1%eth0", "fe80::%eth0/64", "", "/", "1.2.3.4/33", "::ffff:0.0.0.0/80",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ps, err := ParseAllowFrom("--allow-from", []string{v})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "--allow-from ") {
				t.Fatalf("error %q does not name the flag", err)
			}
			return
		}
		if len(ps) != 1 {
			t.Fatalf("%q gave %d prefixes", v, len(ps))
		}
		p := ps[0]
		if !p.IsValid() || p.Masked() != p || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			t.Fatalf("%q accepted as %v", v, p)
		}
		again, err := ParseAllowFrom("--allow-from", []string{p.String()})
		if err != nil || again[0] != p {
			t.Fatalf("%q -> %v does not round-trip: %v, %v", v, p, again, err)
		}
	})
}
