package integration

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sforge-dev/netiso/internal/testbin"
	"github.com/sforge-dev/netiso/internal/testcluster"
)

// TestK8sNodeContainerd2 runs the runtime-dependent core of TestK8sNode on
// containerd 2.x (built from its Go module by hack/k8s/build-containerd.sh)
// instead of Debian's 1.6: containerd 2 rewrote the CRI plugin that hands
// the Pod's annotations to CNI, so sforge-cni's one source of the
// allowlist is checked on it too. The isolated Pod's first, forbidden
// packet is refused and it reaches the Judge; the allowlist arrived through
// the io.kubernetes.cri.pod-annotations capability (from the captured
// plugin stdin); a Pod without the annotation has full reach; a malformed
// annotation fails the sandbox. The NetworkPolicy, `sforge run` and
// admission parts of TestK8sNode do not depend on the runtime and are not
// repeated. Afterwards nothing of the cluster may be left on the host.
func TestK8sNodeContainerd2(t *testing.T) {
	runOnNode(t, testcluster.Options{
		SforgeCNI:  testbin.Build(t, "./cmd/sforge-cni"),
		CaptureCNI: true,
		Probe:      testbin.Build(t, "./cmd/sforge-probe"),
		Containerd: testcluster.Containerd2,
	}, func(t *testing.T, c *testcluster.Cluster) {
		// The kubelet talks to containerd 2, not to a 1.6 found on PATH.
		n, err := c.Client(t).CoreV1().Nodes().Get(context.Background(), c.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rv := n.Status.NodeInfo.ContainerRuntimeVersion
		t.Logf("node runtime: %s", rv)
		// CRI reports the version without its "v".
		if want := "containerd://" + testcluster.Containerd2Version; rv != want {
			t.Fatalf("node reports runtime %q, want %q", rv, want)
		}
		const ns = "agents"
		c.PrepareNamespace(t, ns)
		t.Run("isolated pod", func(t *testing.T) { testNodeIsolatedPod(t, c, ns) })
		t.Run("open pod", func(t *testing.T) { testNodeOpenPod(t, c, ns) })
		t.Run("malformed annotation", func(t *testing.T) { testNodeMalformedAnnotation(t, c, ns) })
	})
}
