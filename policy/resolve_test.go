package policy

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeResolver answers from a table; a host missing from it is unknown.
type fakeResolver struct {
	addrs map[string][]string
	delay time.Duration
	calls []string
}

func (f *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.calls = append(f.calls, network+"/"+host)
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	list, ok := f.addrs[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	var out []netip.Addr
	for _, s := range list {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

func mustTarget(t *testing.T, source, raw string) Target {
	t.Helper()
	tg, err := ParseTarget(source, raw)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestResolve(t *testing.T) {
	r := &fakeResolver{addrs: map[string][]string{
		"api.example.com": {"104.18.2.1", "2606:4700::1", "104.18.1.1", "104.18.1.1"},
		"v6only.example":  {"2606:4700::2"},
		"mapped.example":  {"::ffff:192.0.2.7"},
	}}
	judge := mustTarget(t, "--judge-url", "http://10.0.0.12:8080")
	api := mustTarget(t, "SFORGE_AGENT_API_BASE_URL", "https://api.example.com/v1")
	eps, resolved, err := Resolve(context.Background(), r, 0, judge, api, judge)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range eps {
		got = append(got, e.String())
	}
	want := []string{"tcp:10.0.0.12:8080", "tcp:104.18.1.1:443", "tcp:104.18.2.1:443"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("endpoints = %v, want %v", got, want)
	}
	if !reflect.DeepEqual(r.calls, []string{"ip/api.example.com"}) {
		t.Fatalf("lookups = %v: IP literals must skip the resolver", r.calls)
	}
	if w := []netip.Addr{netip.MustParseAddr("104.18.1.1"), netip.MustParseAddr("104.18.2.1")}; !reflect.DeepEqual(resolved["api.example.com"], w) {
		t.Fatalf("resolved = %v", resolved)
	}
	if _, ok := resolved["10.0.0.12"]; ok {
		t.Fatal("IP literals must not appear as resolved names")
	}

	eps, _, err = Resolve(context.Background(), r, 0, mustTarget(t, "--api-url", "http://mapped.example"))
	if err != nil || len(eps) != 1 || eps[0].String() != "tcp:192.0.2.7:80" {
		t.Fatalf("v4-mapped answer: %v %v", eps, err)
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		name    string
		r       Resolver
		raw     string
		timeout time.Duration
		want    []string
	}{
		{name: "unknown", r: &fakeResolver{}, raw: "https://nope.example", want: []string{"SFORGE_AGENT_API_BASE_URL: cannot resolve nope.example", "no such host", "use an IPv4 address"}},
		{name: "ipv6 only", r: &fakeResolver{addrs: map[string][]string{"v6.example": {"2001:db8::1"}}}, raw: "https://v6.example", want: []string{"cannot resolve v6.example", "no IPv4 address", "IPv6 is blocked"}},
		{name: "empty answer", r: &fakeResolver{addrs: map[string][]string{"e.example": {}}}, raw: "https://e.example", want: []string{"no IPv4 address"}},
		{name: "timeout", r: &fakeResolver{addrs: map[string][]string{"slow.example": {"192.0.2.1"}}, delay: time.Second}, raw: "https://slow.example", timeout: 20 * time.Millisecond, want: []string{"timed out"}},
		{name: "nil resolver", r: nil, raw: "https://a.example", want: []string{"no resolver"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Resolve(context.Background(), tt.r, tt.timeout, mustTarget(t, "SFORGE_AGENT_API_BASE_URL", tt.raw))
			if err == nil {
				t.Fatal("want an error")
			}
			var re *ResolveError
			if !errors.As(err, &re) {
				t.Fatalf("error %T is not a *ResolveError", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
