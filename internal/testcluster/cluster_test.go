package testcluster

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sforge-dev/netiso/internal/testbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Cleanup()
	os.Exit(code)
}

// TestClusterLifecycle brings a node up, runs a Pod on it, and checks that
// once the test that started it has ended nothing of it is left on the
// host and the host's sysctls and directories are as before.
func TestClusterLifecycle(t *testing.T) {
	before := SnapshotHost()
	var id string
	t.Run("cluster", func(t *testing.T) {
		c := Start(t, Options{
			SforgeCNI: testbin.Build(t, "./cmd/sforge-cni"),
			Probe:     testbin.Build(t, "./cmd/sforge-probe"),
		})
		id = c.ID
		cs := c.Client(t)
		ctx := context.Background()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hello"},
			Spec: corev1.PodSpec{
				NodeName:      c.NodeName,
				RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{
					Name: "hello", Image: ProbeImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", "echo hello"},
				}},
			},
		}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			p, err := cs.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Status.Phase == corev1.PodSucceeded {
				break
			}
			if p.Status.Phase == corev1.PodFailed || time.Now().After(deadline) {
				t.Fatalf("pod: %+v", p.Status)
			}
			time.Sleep(200 * time.Millisecond)
		}
		logs, err := cs.CoreV1().Pods("default").GetLogs("hello", &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(logs)) != "hello" {
			t.Errorf("logs %q", logs)
		}
	})
	if id == "" {
		return
	}
	if left := Leftovers(id, before); len(left) > 0 {
		t.Errorf("left on the host after teardown:\n%s", strings.Join(left, "\n"))
	}
}
