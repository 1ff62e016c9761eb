package podapi

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestNetRawKeepers(t *testing.T) {
	drop := func(caps ...corev1.Capability) *corev1.SecurityContext {
		return &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: caps}}
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		Containers: []corev1.Container{
			{Name: "drops", SecurityContext: drop("NET_RAW")},
			{Name: "drops-all", SecurityContext: drop("all")},
			{Name: "drops-prefixed", SecurityContext: drop("cap_net_raw")},
			{Name: "no-context"},
			{Name: "drops-other", SecurityContext: drop("CHOWN")},
		},
		InitContainers: []corev1.Container{{Name: "init"}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug"}},
			{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug-dropping", SecurityContext: drop("NET_RAW")}}},
	}}
	if got, want := NetRawKeepers(pod), []string{"no-context", "drops-other", "init", "debug"}; !slices.Equal(got, want) {
		t.Fatalf("NetRawKeepers = %v, want %v", got, want)
	}
}
