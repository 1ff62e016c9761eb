package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// DomainPattern is one entry of a domain allowlist: a name that matches
// itself only, or "*.NAME", which matches the names under NAME and not
// NAME itself (as a certificate's wildcard, but at any depth).
type DomainPattern struct {
	// Name is the name, or the wildcard's parent, in lower case without
	// a final dot.
	Name     string
	Wildcard bool
}

func (d DomainPattern) String() string {
	if d.Wildcard {
		return "*." + d.Name
	}
	return d.Name
}

// Match reports whether host (a name as a client sent it: any case, an
// optional final dot) is allowed by d. An IP literal never matches.
func (d DomainPattern) Match(host string) bool {
	h, ok := canonicalHost(host)
	if !ok {
		return false
	}
	if d.Wildcard {
		return strings.HasSuffix(h, "."+d.Name)
	}
	return h == d.Name
}

// ParseDomainPattern checks one allowed domain; field names where it came
// from (--allow-domain, "allow_domains"[2]) for the error.
func ParseDomainPattern(field, s string) (DomainPattern, error) {
	d, err := CheckDomainPattern(s)
	if err != nil {
		return DomainPattern{}, fmt.Errorf("%s %q: %v", field, s, err)
	}
	return d, nil
}

// CheckDomainPattern checks one allowed domain. Upper case and a final dot
// are accepted and folded; a wildcard must be a whole first label
// ("*.example.com"), over a name of at least two labels, so that "*.com"
// cannot open a top-level domain.
func CheckDomainPattern(s string) (DomainPattern, error) {
	s = strings.TrimSuffix(strings.ToLower(s), ".")
	var d DomainPattern
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		d.Wildcard, s = true, rest
	}
	if strings.Contains(s, "*") {
		return DomainPattern{}, fmt.Errorf("'*' may only be the whole first label, as in *.example.com")
	}
	if _, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return DomainPattern{}, fmt.Errorf("an IP address, not a name; allow addresses with the allowlist (--judge-url, the API URL), not as a domain")
	}
	if err := CheckHost(s); err != nil {
		return DomainPattern{}, err
	}
	if d.Wildcard && !strings.Contains(s, ".") {
		return DomainPattern{}, fmt.Errorf("a wildcard must be under a name of at least two labels (*.example.com), not a top-level domain")
	}
	d.Name = s
	return d, nil
}

// ParseDomainPatterns parses a list (flag or task field) and returns it
// sorted and without duplicates; field is the list's name, and each entry
// is named field[i] in errors.
func ParseDomainPatterns(field string, list []string) ([]DomainPattern, error) {
	out := make([]DomainPattern, 0, len(list))
	for i, s := range list {
		d, err := ParseDomainPattern(fmt.Sprintf("%s[%d]", field, i), s)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return CompactDomains(out), nil
}

// CompactDomains returns patterns sorted and without duplicates.
func CompactDomains(patterns []DomainPattern) []DomainPattern {
	out := slices.Clone(patterns)
	slices.SortFunc(out, func(a, b DomainPattern) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}

// MatchDomain reports whether any pattern allows host.
func MatchDomain(patterns []DomainPattern, host string) bool {
	for _, d := range patterns {
		if d.Match(host) {
			return true
		}
	}
	return false
}

// canonicalHost folds a client's host name for matching: lower case, no
// final dot; false for an IP literal or a name CheckHost refuses.
func canonicalHost(host string) (string, bool) {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return "", false
	}
	if CheckHost(h) != nil {
		return "", false
	}
	return h, true
}
