package testcluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// PrepareNamespace creates namespace and waits until
// kube-controller-manager has given it the default ServiceAccount, without
// which the API server refuses Pods.
func (c *Cluster) PrepareNamespace(t testing.TB, namespace string) {
	t.Helper()
	ctx := context.Background()
	cs := c.Client(t)
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("failed to create namespace %s: %v", namespace, err)
	}
	c.Eventually(t, "the default ServiceAccount of namespace "+namespace, time.Minute, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
}

// Eventually polls done every 200 ms until it returns true, failing the
// test after limit with the kubelet's log tail.
func (c *Cluster) Eventually(t testing.TB, what string, limit time.Duration, done func(ctx context.Context) (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ok, err := done(ctx)
		cancel()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)\n--- tail of the kubelet's log:\n%s", limit, what, last, c.kubelet.Tail(30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// PodRun is a Pod that ran to its end on the node.
type PodRun struct {
	Pod  *corev1.Pod
	Logs string
	// Started is the time from the create call to the first sight of a
	// started container, polled every 100 ms.
	Started time.Duration
}

// ExitCode is the exit code of the Pod's first container, -1 if none
// terminated.
func (r *PodRun) ExitCode() int {
	for _, s := range r.Pod.Status.ContainerStatuses {
		if s.State.Terminated != nil {
			return int(s.State.Terminated.ExitCode)
		}
	}
	return -1
}

// RunPod creates pod on the node (setting spec.nodeName), waits until it
// has terminated (Succeeded or Failed) and returns it with its logs, read
// through the API server from the kubelet. On timeout it fails the test
// with the Pod's status and events.
func (c *Cluster) RunPod(t testing.TB, pod *corev1.Pod, limit time.Duration) *PodRun {
	t.Helper()
	ctx := context.Background()
	cs := c.Client(t)
	pod.Spec.NodeName = c.NodeName
	begin := time.Now()
	if _, err := cs.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("failed to create pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	run := &PodRun{}
	deadline := begin.Add(limit)
	for {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if run.Started == 0 {
			for _, s := range p.Status.ContainerStatuses {
				if s.State.Running != nil || s.State.Terminated != nil {
					run.Started = time.Since(begin)
				}
			}
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			run.Pod = p
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s not done after %s: phase %s, status %s\nevents:\n%s\n--- tail of the kubelet's log:\n%s",
				pod.Namespace, pod.Name, limit, p.Status.Phase, statusJSON(p), c.Events(t, pod.Namespace, pod.Name), c.kubelet.Tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	logs, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("failed to read the logs of pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	run.Logs = string(logs)
	return run
}

func statusJSON(p *corev1.Pod) string {
	b, _ := json.Marshal(p.Status)
	return string(b)
}

// Events returns the events about a Pod, oldest first, one per line.
func (c *Cluster) Events(t testing.TB, namespace, pod string) string {
	t.Helper()
	evs, err := c.Client(t).CoreV1().Events(namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
	})
	if err != nil {
		return fmt.Sprintf("(cannot list events: %v)", err)
	}
	sort.Slice(evs.Items, func(i, j int) bool { return evs.Items[i].LastTimestamp.Before(&evs.Items[j].LastTimestamp) })
	var b strings.Builder
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "%s %s: %s\n", e.Type, e.Reason, e.Message)
	}
	return b.String()
}

// CNICall is one call of sforge-cni, as the capture wrapper recorded it
// (Options.CaptureCNI).
type CNICall struct {
	Command string
	Args    map[string]string // CNI_ARGS
	Config  map[string]any    // the network config on stdin
}

// RuntimeConfig returns the runtimeConfig the runtime passed, or nil.
func (c CNICall) RuntimeConfig() map[string]any {
	rc, _ := c.Config["runtimeConfig"].(map[string]any)
	return rc
}

// CNICalls returns sforge-cni's calls so far, oldest first.
func (c *Cluster) CNICalls(t testing.TB) []CNICall {
	t.Helper()
	if c.capturePath == "" {
		t.Fatal("testcluster: CNICalls needs Options.CaptureCNI")
	}
	f, err := os.Open(c.capturePath)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var calls []CNICall
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), "\t", 3)
		if len(parts) != 3 {
			t.Fatalf("testcluster: malformed capture line %q", sc.Text())
		}
		call := CNICall{Command: parts[0], Args: map[string]string{}}
		for _, kv := range strings.Split(parts[1], ";") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				call.Args[k] = v
			}
		}
		if err := json.Unmarshal([]byte(parts[2]), &call.Config); err != nil {
			t.Fatalf("testcluster: capture of a %s call is not JSON: %v: %q", call.Command, err, parts[2])
		}
		calls = append(calls, call)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return calls
}

// CNILogLines returns the lines of sforge-cni's log file.
func (c *Cluster) CNILogLines(t testing.TB) []string {
	t.Helper()
	data, err := os.ReadFile(c.CNILog)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(data), "\n"), "\n")
}
