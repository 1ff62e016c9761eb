package netpol

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNameAndLabelValue(t *testing.T) {
	long := func(n int, unit string) string { return strings.Repeat(unit, n)[:n] }
	tests := []struct {
		name      string
		pod       string
		wantName  string // "" = only check validity and determinism
		wantLabel string
	}{
		{name: "short", pod: "agent-1", wantName: "sforge-iso-agent-1", wantLabel: "agent-1"},
		{name: "dotted", pod: "task.run-7", wantName: "sforge-iso-task.run-7", wantLabel: "task.run-7"},
		{name: "label limit exactly", pod: long(63, "a"), wantName: "sforge-iso-" + long(63, "a"), wantLabel: long(63, "a")},
		{name: "label limit plus one", pod: long(64, "a")},
		{name: "name limit exactly", pod: long(253-len(NamePrefix), "b")},
		{name: "name limit plus one", pod: long(254-len(NamePrefix), "c")},
		{name: "max pod name", pod: long(253, "d")},
		// Truncation must not end on '-' or '.' nor leave ".-": the name
		// keeps 231 characters of the pod name, the label value 52.
		{name: "name cut on a dot", pod: long(230, "a") + "." + long(22, "b")},
		{name: "name cut in dashes", pod: long(229, "a") + "--" + long(22, "b")},
		{name: "label cut on a dot", pod: long(51, "a") + "." + long(20, "b")},
		{name: "label cut in dashes", pod: long(50, "a") + "---" + long(20, "b")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ValidatePodName(tt.pod); err != nil {
				t.Fatalf("test pod name is invalid: %v", err)
			}
			n, l := Name(tt.pod), LabelValue(tt.pod)
			if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
				t.Errorf("Name(%q) = %q is not a valid object name: %v", tt.pod, n, errs)
			}
			if !strings.HasPrefix(n, NamePrefix) {
				t.Errorf("Name(%q) = %q lacks prefix %q", tt.pod, n, NamePrefix)
			}
			if errs := validation.IsValidLabelValue(l); len(errs) > 0 {
				t.Errorf("LabelValue(%q) = %q is not a valid label value: %v", tt.pod, l, errs)
			}
			if Name(tt.pod) != n || LabelValue(tt.pod) != l {
				t.Error("not deterministic")
			}
			if tt.wantName != "" && n != tt.wantName {
				t.Errorf("Name = %q, want %q", n, tt.wantName)
			}
			if tt.wantLabel != "" && l != tt.wantLabel {
				t.Errorf("LabelValue = %q, want %q", l, tt.wantLabel)
			}
			if len(NamePrefix)+len(tt.pod) > validation.DNS1123SubdomainMaxLength && len(n) > validation.DNS1123SubdomainMaxLength {
				t.Errorf("Name too long: %d", len(n))
			}
		})
	}
}

// TestShortenedNamesStayApart: two long names that share everything but
// their end get different policy names and label values.
func TestShortenedNamesStayApart(t *testing.T) {
	base := strings.Repeat("x", 250)
	a, b := base+"-a1", base+"-a2"
	if Name(a) == Name(b) {
		t.Errorf("Name collides: %q", Name(a))
	}
	if LabelValue(a) == LabelValue(b) {
		t.Errorf("LabelValue collides: %q", LabelValue(a))
	}
	if got := PodLabels(a)[PodLabel]; got != LabelValue(a) {
		t.Errorf("PodLabels = %q, want %q", got, LabelValue(a))
	}
}

func TestValidatePodName(t *testing.T) {
	for _, bad := range []string{"", "Agent", "agent_1", "-agent", "agent.", strings.Repeat("a", 254)} {
		if err := ValidatePodName(bad); err == nil {
			t.Errorf("ValidatePodName(%q) = nil, want an error", bad)
		} else if !strings.Contains(err.Error(), "invalid pod name") {
			t.Errorf("ValidatePodName(%q) = %v, want it to name the pod name", bad, err)
		}
	}
}
