package policy

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Target is a service the sandbox must reach, taken from a URL such as the
// Judge URL or the agent's API base URL. Source names where the URL came
// from (a flag or an environment variable) so that every error can say so.
type Target struct {
	Source string
	Scheme string
	Host   string // hostname or IPv4 literal, without brackets
	Port   uint16
}

func (t Target) String() string {
	return t.Host + ":" + strconv.Itoa(int(t.Port))
}

// URLError reports a URL that cannot be turned into a Target. Source is the
// flag or variable the URL came from.
type URLError struct {
	Source string
	URL    string
	Reason string
}

func (e *URLError) Error() string {
	return fmt.Sprintf("%s %q: %s", e.Source, e.URL, e.Reason)
}

var defaultPorts = map[string]uint16{"http": 80, "https": 443}

// ParseHTTPURL performs the checks every URL sforge is given shares: an
// http or https URL with a host, no credentials and a port in 1-65535.
// It returns the parsed URL (scheme lowercased) and the effective port,
// 80 or 443 by scheme when absent. Errors are *URLError naming source.
func ParseHTTPURL(source, raw string) (*url.URL, uint16, error) {
	fail := func(format string, args ...any) (*url.URL, uint16, error) {
		return nil, 0, &URLError{Source: source, URL: raw, Reason: fmt.Sprintf(format, args...)}
	}
	if strings.TrimSpace(raw) == "" {
		return fail("is empty (want a URL such as http[s]://HOST[:PORT][/PATH])")
	}
	if raw != strings.TrimSpace(raw) {
		return fail("has leading or trailing spaces")
	}
	if !strings.Contains(raw, "://") {
		return fail("is not of the form http[s]://HOST[:PORT][/PATH]")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the URL; keep only its reason.
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err
		}
		return fail("is not a valid URL: %v", err)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	port, ok := defaultPorts[u.Scheme]
	if !ok {
		return fail("has scheme %q (allowed: http, https)", u.Scheme)
	}
	if u.Opaque != "" {
		return fail("is not of the form http[s]://HOST[:PORT][/PATH]")
	}
	if u.User != nil {
		return fail("carries credentials (user:password@); keep keys out of URLs: `sforge proxy --api-key-env` injects them")
	}
	if u.Hostname() == "" {
		return fail("has no host")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return fail("has invalid port %q (want 1-65535)", p)
		}
		port = uint16(n)
	} else if strings.HasSuffix(u.Host, ":") {
		return fail("has an empty port")
	}
	return u, port, nil
}

// ParseTarget parses an http or https URL into the host and port the sandbox
// must reach; the port defaults to 80 or 443 by scheme. On top of
// ParseHTTPURL's checks, IPv6 literals and malformed names are refused:
// IPv6 is blocked inside the sandbox.
func ParseTarget(source, raw string) (Target, error) {
	u, port, err := ParseHTTPURL(source, raw)
	if err != nil {
		return Target{}, err
	}
	fail := func(format string, args ...any) (Target, error) {
		return Target{}, &URLError{Source: source, URL: raw, Reason: fmt.Sprintf(format, args...)}
	}
	host := u.Hostname()
	if strings.Contains(u.Host, "[") {
		return fail("has an IPv6 host; IPv6 is blocked inside the sandbox, use an IPv4 address or name")
	}
	if addr, err := netip.ParseAddr(host); err == nil && !addr.Is4() {
		return fail("has a non-IPv4 host %s", host)
	}
	if !validHostname(host) {
		return fail("has invalid host %q", host)
	}
	return Target{Source: source, Scheme: u.Scheme, Host: strings.ToLower(host), Port: port}, nil
}

// validHostname accepts IPv4 literals and DNS names made of letters, digits,
// hyphens, underscores and dots.
func validHostname(h string) bool {
	if len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			switch {
			case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			default:
				return false
			}
		}
	}
	return true
}

// IsLoopback reports whether the target names this machine's loopback
// (127.0.0.0/8 or "localhost"), which a Pod or container cannot reach.
func (t Target) IsLoopback() bool {
	if t.Host == "localhost" || strings.HasSuffix(t.Host, ".localhost") {
		return true
	}
	addr, err := netip.ParseAddr(t.Host)
	return err == nil && addr.IsLoopback()
}
