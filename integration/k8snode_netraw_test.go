package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sforge-dev/netiso/internal/testbin"
	"github.com/sforge-dev/netiso/internal/testcluster"
	"github.com/sforge-dev/netiso/policy"
)

// TestK8sNodeNetRaw: on a node without the admission policy, sforge-cni
// with a kubeconfig that may read Pods refuses the sandbox of an isolated
// Pod created without any securityContext (containerd grants NET_RAW, and
// raw and packet sockets, for the Pod's processes and every `kubectl exec`,
// bypass the rules); the same Pod dropping NET_RAW runs isolated.
func TestK8sNodeNetRaw(t *testing.T) {
	runOnNode(t, testcluster.Options{
		SforgeCNI:           testbin.Build(t, "./cmd/sforge-cni"),
		SforgeCNIKubeconfig: true,
		Probe:               testbin.Build(t, "./cmd/sforge-probe"),
	}, func(t *testing.T, c *testcluster.Cluster) {
		const ns = "agents"
		c.PrepareNamespace(t, ns)
		ctx := context.Background()
		cs := c.Client(t)
		allow := isolatedAllowlist(t)
		bare := probePod(ns, "bare", map[string]string{policy.AnnotationKey: allow})
		bare.Spec.NodeName = c.NodeName
		bare.Spec.Containers[0].SecurityContext = nil
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, bare, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var event string
		c.Eventually(t, "the kubelet to report the failed sandbox of pod bare", 2*time.Minute, func(ctx context.Context) (bool, error) {
			for _, l := range strings.Split(c.Events(t, ns, "bare"), "\n") {
				if strings.Contains(l, "FailedCreatePodSandBox") && strings.Contains(l, "sforge-cni") {
					event = l
					return true, nil
				}
			}
			return false, nil
		})
		t.Logf("event: %s", event)
		if !strings.Contains(event, "container(s) agent keep NET_RAW") || !strings.Contains(event, "securityContext.capabilities.drop") {
			t.Errorf("the sandbox error does not name the container and the fix: %s", event)
		}
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "bare", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != corev1.PodPending {
			t.Errorf("phase %s, want Pending", p.Status.Phase)
		}
		deletePod(t, c, ns, "bare")

		good := probePod(ns, "dropping", map[string]string{policy.AnnotationKey: allow})
		good.Spec.Containers[0].Command = []string{testcluster.ProbePath, "tcp", judgeTarget}
		run := c.RunPod(t, good, 3*time.Minute)
		if code := run.ExitCode(); code != 0 {
			t.Errorf("the Pod dropping NET_RAW: exit code %d, logs:\n%s", code, run.Logs)
		}
	})
}
