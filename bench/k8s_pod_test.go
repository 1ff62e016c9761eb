package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sforge-dev/netiso/bench/internal/timing"
	"github.com/sforge-dev/netiso/internal/testbin"
	"github.com/sforge-dev/netiso/internal/testcluster"
	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/policy"
)

// BenchmarkK8sPodReady: time from a Pod's create call to its Ready
// condition on the real test node (kubelet, containerd 1.6, bridge +
// host-local with sforge-cni chained by `sforge install --cni`), Pods with
// the allowlist annotation (sforge-cni installs the rules at ADD) against
// the same Pods without it (sforge-cni passes the result through), and
// isolated Pods with a resolver of their own (--dns-to sforge: sforge-cni
// also starts it at ADD), interleaved.
func BenchmarkK8sPodReady(b *testing.B) {
	testenv.RequireRoot(b)
	b.Cleanup(testbin.Cleanup)
	c := testcluster.Start(b, testcluster.Options{SforgeCNI: testbin.Build(b, "./cmd/sforge-cni")})
	const ns = "bench"
	c.PrepareNamespace(b, ns)
	cs := c.Client(b)
	ep, err := policy.HostEndpoint(netip.MustParseAddr(testcluster.JudgeIP), policy.TCP, testcluster.JudgePort)
	if err != nil {
		b.Fatal(err)
	}
	allow, err := policy.Encode(policy.Allowlist{Endpoints: []policy.Endpoint{ep}})
	if err != nil {
		b.Fatal(err)
	}
	own, err := policy.Encode(policy.Allowlist{Endpoints: []policy.Endpoint{ep}, Resolver: policy.DefaultResolver,
		Names: []policy.Name{{Host: "judge.sforge.test", Addr: ep.Prefix.Addr()}}})
	if err != nil {
		b.Fatal(err)
	}
	ownDNS := &corev1.PodDNSConfig{Nameservers: []string{policy.DefaultResolver.String()}}
	kinds := []struct {
		name        string
		annotations map[string]string
		dns         *corev1.PodDNSConfig
	}{
		{"Pod, no allowlist", nil, nil},
		{"Pod, isolated by sforge-cni", map[string]string{policy.AnnotationKey: allow}, nil},
		{"Pod, isolated, own resolver", map[string]string{policy.AnnotationKey: own}, ownDNS},
	}
	nr := rounds(15)
	samples := make([]timing.Samples, len(kinds))
	pods := 0
	start := time.Now()
	for range b.N {
		for round := range nr {
			for k := range kinds {
				kind := (k + round) % len(kinds)
				pods++
				name := fmt.Sprintf("ready-%d", pods)
				d, err := podReady(cs, ns, name, kinds[kind].annotations, kinds[kind].dns)
				if err != nil {
					b.Fatalf("%s: %v", kinds[kind].name, err)
				}
				samples[kind] = append(samples[kind], d)
			}
		}
	}
	elapsed := time.Since(start)
	log, err := os.ReadFile(c.CNILog)
	if err != nil {
		b.Fatal(err)
	}
	if got, want := strings.Count(string(log), " ADD container="), 2*nr*b.N; got != want {
		b.Fatalf("sforge-cni installed for %d Pods, want %d:\n%s", got, want, log)
	}
	if got, want := strings.Count(string(log), " RESOLVER container="), nr*b.N; got != want {
		b.Fatalf("sforge-cni started %d resolvers, want %d:\n%s", got, want, log)
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nPod create to Ready on the test node, %d rounds interleaved in %s; load average %s\n", nr, elapsed.Round(time.Second), loadAvg())
	fmt.Fprintf(&out, "ms, median / p95; ratio = of medians; paired = median of the per-round ratios\n")
	for k, kind := range kinds {
		ratio, paired := 1.0, 1.0
		if k > 0 {
			ratio, paired = timing.Ratio(samples[k], samples[0]), timing.PairedRatio(samples[k], samples[0])
		}
		fmt.Fprintf(&out, "%-30s %8s / %8s %6.2fx %6.2fx\n", kind.name, timing.Ms(samples[k].Median()), timing.Ms(samples[k].P95()), ratio, paired)
	}
	fmt.Print(out.String())
	b.ReportMetric(timing.Ratio(samples[1], samples[0]), "isolated/plain")
	b.ReportMetric(timing.Ratio(samples[2], samples[0]), "own-resolver/plain")
}

// podReady creates a Pod running the sandbox image's pause (with dns as
// its only DNS configuration when not nil), waits (bounded) for its Ready
// condition, and deletes it, waiting until it is gone; it returns the time
// from the create call to Ready.
func podReady(cs kubernetes.Interface, ns, name string, annotations map[string]string, dns *corev1.PodDNSConfig) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{
				Name: "agent", Image: testcluster.SandboxImage, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}},
			}},
		},
	}
	if dns != nil {
		pod.Spec.DNSPolicy, pod.Spec.DNSConfig = corev1.DNSNone, dns
	}
	t0 := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	var ready time.Duration
	for ready == 0 {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return 0, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready = time.Since(t0)
			}
		}
		if p.Status.Phase == corev1.PodFailed {
			return 0, fmt.Errorf("pod %s failed: %s", name, p.Status.Message)
		}
		if ready == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	grace := int64(0)
	if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		return 0, err
	}
	for {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return ready, nil
		}
		if err != nil {
			return 0, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
