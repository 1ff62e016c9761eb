package netpol

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// The fake clientset stands in for the API server here; the same
// behaviours run against a real kube-apiserver in
// integration/k8s_apiserver_test.go.

func build(t *testing.T, value, pod string) *networkingv1.NetworkPolicy {
	t.Helper()
	np, err := Build(mustDecode(t, value), Options{Namespace: "ns1", Pod: pod})
	if err != nil {
		t.Fatal(err)
	}
	return np
}

func TestEmitterApplyIsIdempotent(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	e := NewEmitter(cs, "ns1")

	first, err := e.Apply(ctx, build(t, "v1;tcp:10.0.0.12:8080", "agent"))
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "ns1", UID: "uid-1"}}
	for range 2 {
		if err := e.SetOwner(ctx, first.Name, pod); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := cs.NetworkingV1().NetworkPolicies("ns1").Get(ctx, first.Name, metav1.GetOptions{})
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "uid-1" || got.OwnerReferences[0].Kind != "Pod" {
		t.Fatalf("owner references after two SetOwner: %+v", got.OwnerReferences)
	}

	// A re-run with another allowlist updates the one policy and drops the
	// previous Pod's owner reference.
	second, err := e.Apply(ctx, build(t, "v1;tcp:10.0.0.13:9090", "agent"))
	if err != nil {
		t.Fatal(err)
	}
	list, _ := cs.NetworkingV1().NetworkPolicies("ns1").List(ctx, metav1.ListOptions{})
	if len(list.Items) != 1 {
		t.Fatalf("%d policies after a re-run, want 1", len(list.Items))
	}
	if cidr := second.Spec.Egress[len(second.Spec.Egress)-1].To[0].IPBlock.CIDR; cidr != "10.0.0.13/32" {
		t.Errorf("policy not updated: last rule to %s", cidr)
	}
	if len(second.OwnerReferences) != 0 {
		t.Errorf("stale owner references kept: %+v", second.OwnerReferences)
	}

	if err := e.Delete(ctx, second.Name); err != nil {
		t.Fatal(err)
	}
	if err := e.Delete(ctx, second.Name); err != nil {
		t.Errorf("second Delete (already gone) = %v, want nil", err)
	}
}

func TestEmitterRefusesForeignPolicy(t *testing.T) {
	ctx := context.Background()
	foreign := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "sforge-iso-agent", Namespace: "ns1"}}
	cs := fake.NewClientset(foreign)
	_, err := NewEmitter(cs, "ns1").Apply(ctx, build(t, "v1;tcp:10.0.0.12:8080", "agent"))
	if !errors.Is(err, ErrNotManaged) {
		t.Fatalf("Apply over a foreign policy = %v, want ErrNotManaged", err)
	}
	got, _ := cs.NetworkingV1().NetworkPolicies("ns1").Get(ctx, "sforge-iso-agent", metav1.GetOptions{})
	if len(got.Spec.Egress) != 0 {
		t.Error("foreign policy was modified")
	}
}

func TestEmitterErrors(t *testing.T) {
	ctx := context.Background()
	e := NewEmitter(fake.NewClientset(), "ns1")
	np := build(t, "v1;tcp:10.0.0.12:8080", "agent")
	np.Namespace = "other"
	if _, err := e.Apply(ctx, np); err == nil || !strings.Contains(err.Error(), `namespace "other"`) {
		t.Errorf("Apply to another namespace = %v", err)
	}
	tests := []struct {
		pod  *corev1.Pod
		want string
	}{
		{nil, "no name or UID"},
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent"}}, "no name or UID"},
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "ns2", UID: "u"}}, `in namespace "ns2"`},
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "ns1", UID: "u"}}, "not found"},
	}
	for _, tt := range tests {
		if err := e.SetOwner(ctx, "sforge-iso-agent", tt.pod); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("SetOwner(%+v) = %v, want %q", tt.pod, err, tt.want)
		}
	}
}
