package policy

import (
	"errors"
	"strings"
	"testing"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		raw     string
		want    Target
		wantErr string
	}{
		{raw: "http://10.0.0.12:8080", want: Target{Scheme: "http", Host: "10.0.0.12", Port: 8080}},
		{raw: "http://10.0.0.12", want: Target{Scheme: "http", Host: "10.0.0.12", Port: 80}},
		{raw: "https://api.anthropic.com", want: Target{Scheme: "https", Host: "api.anthropic.com", Port: 443}},
		{raw: "HTTPS://API.Example.COM/v1/", want: Target{Scheme: "https", Host: "api.example.com", Port: 443}},
		{raw: "http://host.docker.internal:9090", want: Target{Scheme: "http", Host: "host.docker.internal", Port: 9090}},
		{raw: "https://judge:65535/path?q=1#f", want: Target{Scheme: "https", Host: "judge", Port: 65535}},
		{raw: "", wantErr: "is empty"},
		{raw: "  ", wantErr: "is empty"},
		{raw: " http://a", wantErr: "leading or trailing spaces"},
		{raw: "10.0.0.12:8080", wantErr: "is not of the form http[s]://HOST"},
		{raw: "judge.local", wantErr: "is not of the form"},
		{raw: "://judge", wantErr: "not a valid URL"},
		{raw: "ftp://a.example", wantErr: `has scheme "ftp" (allowed: http, https)`},
		{raw: "http://user:pw@a.example", wantErr: "carries credentials"},
		{raw: "http://user@a.example", wantErr: "carries credentials"},
		{raw: "http://", wantErr: "has no host"},
		{raw: "http:///path", wantErr: "has no host"},
		{raw: "http:judge", wantErr: "is not of the form"},
		{raw: "http://a.example:0", wantErr: `invalid port "0"`},
		{raw: "http://a.example:65536", wantErr: "invalid port"},
		{raw: "http://a.example:http", wantErr: "not a valid URL"},
		{raw: "http://a.example:", wantErr: "empty port"},
		{raw: "http://[::1]:80", wantErr: "IPv6 host"},
		{raw: "http://a b.example", wantErr: "not a valid URL"},
		{raw: "http://a..example", wantErr: "invalid host"},
		{raw: "http://%41.example", wantErr: "not a valid URL"},
		{raw: "http://a_b.example/", want: Target{Scheme: "http", Host: "a_b.example", Port: 80}},
		{raw: "http://a$b.example/", wantErr: "invalid host"},
		{raw: "http://a.example\n", wantErr: "leading or trailing spaces"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			got, err := ParseTarget("--judge-url", tt.raw)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseTarget(%q) = %+v, want error containing %q", tt.raw, got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "--judge-url ") {
					t.Fatalf("error %q: want it to start with the flag and contain %q", err, tt.wantErr)
				}
				var ue *URLError
				if !errors.As(err, &ue) {
					t.Fatalf("error %T is not a *URLError", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTarget(%q): %v", tt.raw, err)
			}
			tt.want.Source = "--judge-url"
			if got != tt.want {
				t.Fatalf("ParseTarget(%q) = %+v, want %+v", tt.raw, got, tt.want)
			}
		})
	}
}

func TestTargetIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.8.9.10": true, "localhost": true, "judge.localhost": true,
		"10.0.0.1": false, "judge": false, "localhost.example": false,
	} {
		if got := (Target{Host: host}).IsLoopback(); got != want {
			t.Errorf("IsLoopback(%s) = %v, want %v", host, got, want)
		}
	}
}
