package proxy

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/policy"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		raw     string
		want    string // canonical URL when accepted
		wantErr string
	}{
		{raw: "https://api.anthropic.com", want: "https://api.anthropic.com"},
		{raw: "HTTPS://api.anthropic.com:443/", want: "https://api.anthropic.com:443/"},
		{raw: "http://10.0.0.5:8080/gateway/anthropic", want: "http://10.0.0.5:8080/gateway/anthropic"},
		{raw: "http://[2001:db8::1]:8080", want: "http://[2001:db8::1]:8080"},
		{raw: "", wantErr: `--target "": is empty (want a URL such as http[s]://HOST[:PORT][/PATH])`},
		{raw: " https://a", wantErr: "has leading or trailing spaces"},
		{raw: "api.anthropic.com", wantErr: "is not of the form http[s]://HOST[:PORT][/PATH]"},
		{raw: "ftp://a", wantErr: `has scheme "ftp" (allowed: http, https)`},
		{raw: "https://user:pw@a", wantErr: "carries credentials (user:password@); keep keys out of URLs"},
		{raw: "https://", wantErr: "has no host"},
		{raw: "https://:443", wantErr: "has no host"},
		{raw: "https://a:0", wantErr: `has invalid port "0" (want 1-65535)`},
		{raw: "https://a:65536", wantErr: `has invalid port "65536" (want 1-65535)`},
		{raw: "https://a:", wantErr: "has an empty port"},
		{raw: "https://a/?key=x", wantErr: "has a query or fragment"},
		{raw: "https://a/#x", wantErr: "has a query or fragment"},
		{raw: "https://a/?", wantErr: "has a query or fragment"},
		{raw: "http://%zz", wantErr: "is not a valid URL"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			u, err := ParseTarget("--target", tt.raw)
			if tt.wantErr != "" {
				var ue *policy.URLError
				if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTarget(%q) = %v, %v; want *policy.URLError containing %q", tt.raw, u, err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "--target ") {
					t.Fatalf("error %q does not name the flag", err)
				}
				return
			}
			if err != nil || u.String() != tt.want {
				t.Fatalf("ParseTarget(%q) = %v, %v; want %s", tt.raw, u, err, tt.want)
			}
		})
	}
}

func TestParseAllowFrom(t *testing.T) {
	tests := []struct {
		in      []string
		want    []string
		wantErr string
	}{
		{in: nil, want: nil},
		{in: []string{"172.17.0.0/16", "127.0.0.1", "::1", "10.0.0.0/8"}, want: []string{"172.17.0.0/16", "127.0.0.1/32", "::1/128", "10.0.0.0/8"}},
		{in: []string{"0.0.0.0/0", "::/0"}, want: []string{"0.0.0.0/0", "::/0"}},
		{in: []string{"::ffff:10.0.0.0/104"}, want: []string{"10.0.0.0/8"}},
		{in: []string{"172.17.0.1/16"}, wantErr: `--allow-from "172.17.0.1/16": network has host bits set (did you mean 172.17.0.0/16?)`},
		{in: []string{"172.17.0.0/33"}, wantErr: `--allow-from "172.17.0.0/33": want a CIDR such as 172.17.0.0/16 or an address`},
		{in: []string{"docker0"}, wantErr: `--allow-from "docker0": want a CIDR`},
		{in: []string{""}, wantErr: `--allow-from "": want a CIDR`},
		{in: []string{"fe80::1%eth0"}, wantErr: "zones are not supported"},
		{in: []string{"::ffff:0.0.0.0/80"}, wantErr: "needs at least 96 bits"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.in, ","), func(t *testing.T) {
			got, err := ParseAllowFrom("--allow-from", tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, p := range got {
				s = append(s, p.String())
			}
			if !slices.Equal(s, tt.want) {
				t.Fatalf("got %v, want %v", s, tt.want)
			}
		})
	}
}

func TestAdmitsPublic(t *testing.T) {
	tests := []struct {
		in   []string
		want bool
	}{
		{nil, false},
		{[]string{"127.0.0.0/8", "172.17.0.0/16", "192.168.1.5/32", "fd00::/8"}, false},
		{[]string{"172.17.0.0/16", "0.0.0.0/0"}, true},
		{[]string{"172.0.0.0/8"}, true},
		{[]string{"203.0.113.5/32"}, true},
		{[]string{"::/0"}, true},
	}
	for _, tt := range tests {
		ps, err := ParseAllowFrom("x", tt.in)
		if err != nil {
			t.Fatal(err)
		}
		if got := admitsPublic(ps); got != tt.want {
			t.Errorf("admitsPublic(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if admitsPublic(DefaultAllowFrom()) {
		t.Error("the default admits public addresses")
	}
}

func TestDefaultAPIKeyHeader(t *testing.T) {
	tests := map[string]string{
		"https://api.anthropic.com":                      "X-Api-Key",
		"https://API.Anthropic.com.":                     "X-Api-Key",
		"https://anthropic.com/v1":                       "X-Api-Key",
		"https://generativelanguage.googleapis.com":      "X-Goog-Api-Key",
		"https://api.openai.com":                         "Authorization",
		"http://10.0.0.5:8080/gateway":                   "Authorization",
		"https://notanthropic.com":                       "Authorization",
		"https://api.anthropic.com.evil.example/prefix/": "Authorization",
	}
	for raw, want := range tests {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := DefaultAPIKeyHeader(u); got != want {
			t.Errorf("DefaultAPIKeyHeader(%s) = %s, want %s", raw, got, want)
		}
	}
}

func TestParseAPIKeyHeader(t *testing.T) {
	tests := []struct {
		in, want, wantErr string
	}{
		{in: "x-api-key", want: "X-Api-Key"},
		{in: "authorization", want: "Authorization"},
		{in: "X-Custom_Key", want: "X-Custom_key"},
		{in: "", wantErr: "--api-key-header is empty"},
		{in: "x api key", wantErr: `--api-key-header "x api key": not a valid header name`},
		{in: "x-key:", wantErr: "not a valid header name"},
		{in: "Host", wantErr: `--api-key-header "Host": a hop-by-hop or framing header cannot carry the key`},
		{in: "proxy-authorization", wantErr: "hop-by-hop"},
		{in: "connection", wantErr: "hop-by-hop"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAPIKeyHeader("--api-key-header", tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestAPIKeyFromEnv(t *testing.T) {
	const secret = "sk-secret-value"
	env := map[string]string{
		"GOOD": secret, "EMPTY": "", "SPACES": " " + secret + "\n", "CTRL": "sk\x01" + secret,
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		name, wantErr string
	}{
		{name: "GOOD"},
		{name: "", wantErr: "--api-key-env is empty"},
		{name: "MISSING", wantErr: "--api-key-env: environment variable MISSING is not set"},
		{name: "EMPTY", wantErr: "--api-key-env: environment variable EMPTY is empty"},
		{name: "SPACES", wantErr: "--api-key-env: environment variable SPACES has leading or trailing whitespace"},
		{name: "CTRL", wantErr: "--api-key-env: environment variable CTRL contains control characters"},
		{name: "A=B", wantErr: `--api-key-env "A=B": not a valid environment variable name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := APIKeyFromEnv(tt.name, lookup)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error %q shows the key", err)
				}
				return
			}
			if err != nil || got != secret {
				t.Fatalf("got %q, %v", got, err)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	target := &url.URL{Scheme: "https", Host: "api.anthropic.com"}
	tests := []struct {
		name    string
		c       Config
		wantErr string
	}{
		{"no target", Config{}, "proxy target is not set"},
		{"bad scheme", Config{Target: &url.URL{Scheme: "ftp", Host: "a"}}, `has scheme "ftp"`},
		{"credentials", Config{Target: &url.URL{Scheme: "https", Host: "a", User: url.UserPassword("u", "p")}}, "carries credentials"},
		{"header without key", Config{Target: target, APIKeyHeader: "x-api-key"}, "API key header is set but there is no API key"},
		{"bad header", Config{Target: target, APIKey: "k", APIKeyHeader: "Host"}, "cannot carry the key"},
		{"bad key", Config{Target: target, APIKey: "k\n"}, "API key has leading or trailing whitespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.c)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
	p, err := New(Config{Target: target, APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if p.KeyHeader() != "X-Api-Key" || !slices.Equal(p.allow, DefaultAllowFrom()) {
		t.Fatalf("defaults: header %q, allow %v", p.KeyHeader(), p.allow)
	}
}
