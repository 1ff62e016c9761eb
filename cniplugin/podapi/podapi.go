// Package podapi reads a Pod's annotations from the Kubernetes API for
// sforge-cni, when the container runtime does not pass them through the
// io.kubernetes.cri.pod-annotations capability. It is kept apart from
// package cniplugin so that the verbs stay testable without client-go.
package podapi

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sforge-dev/netiso/cniplugin"
)

// Lookup implements cniplugin.PodLookup with client-go.
type Lookup struct{}

var _ cniplugin.PodLookup = Lookup{}

// UIDMismatchError reports that the Pod found under the name is not the one
// the runtime is setting up (it was deleted and recreated meanwhile).
type UIDMismatchError struct {
	Namespace, Name, Want, Got string
}

func (e *UIDMismatchError) Error() string {
	return fmt.Sprintf("pod %s/%s has UID %s, but the runtime is setting up UID %s: refusing to use another Pod's annotations", e.Namespace, e.Name, e.Got, e.Want)
}

// Annotations fetches the Pod and returns its annotations, after checking
// its UID when one is given.
func (Lookup) Annotations(ctx context.Context, kubeconfig, namespace, name, uid string) (map[string]string, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("failed to load kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to create Kubernetes client: %w", err)
	}
	pod, err := cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("failed to get pod %s/%s: %w", namespace, name, err)
	}
	if uid != "" && pod.UID != types.UID(uid) {
		return nil, &UIDMismatchError{Namespace: namespace, Name: name, Want: uid, Got: string(pod.UID)}
	}
	return pod.Annotations, nil
}
