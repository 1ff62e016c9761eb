package netpol

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sforge-dev/netiso/policy"
)

// FuzzBuild feeds arbitrary Pod names, namespaces and DNS modes (all come
// from flags or the API) to Build: it never panics, refuses what the API
// server would refuse, and for every accepted Pod name produces a valid
// policy name and label value.
func FuzzBuild(f *testing.F) {
	f.Add("agent-1", "default", "")
	f.Add(strings.Repeat("a", 230)+"."+strings.Repeat("b", 22), "evals", "any")
	f.Add(strings.Repeat("x", 63), "kube-system", "kube-dns")
	f.Add("Agent_1", "Default", "everywhere")
	f.Add("a.-b", "ns", "")
	a := policy.Allowlist{}
	f.Fuzz(func(t *testing.T, pod, namespace, dnsTo string) {
		np, err := Build(a, Options{Namespace: namespace, Pod: pod, DNSTo: DNSTo(dnsTo)})
		if ValidatePodName(pod) != nil {
			if err == nil {
				t.Fatalf("Build accepted invalid pod name %q", pod)
			}
			return
		}
		if errs := validation.IsDNS1123Subdomain(Name(pod)); len(errs) > 0 {
			t.Fatalf("Name(%q) = %q invalid: %v", pod, Name(pod), errs)
		}
		if errs := validation.IsValidLabelValue(LabelValue(pod)); len(errs) > 0 {
			t.Fatalf("LabelValue(%q) = %q invalid: %v", pod, LabelValue(pod), errs)
		}
		if err == nil && (np.Name != Name(pod) || np.Spec.PodSelector.MatchLabels[PodLabel] != LabelValue(pod)) {
			t.Fatalf("policy %q selects %v", np.Name, np.Spec.PodSelector.MatchLabels)
		}
	})
}
