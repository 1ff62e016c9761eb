package netpol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// FieldManager names sforge in the policy's managedFields.
const FieldManager = "sforge"

// ErrNotManaged is returned by Apply when a policy of the same name exists
// and was not created by sforge: it is never overwritten.
var ErrNotManaged = errors.New("not managed by sforge")

// Emitter applies, owns and deletes the policies of one namespace. It is
// safe for concurrent use by a batch of launches sharing one clientset.
type Emitter struct {
	client    kubernetes.Interface
	namespace string
}

// NewEmitter returns an Emitter for namespace.
func NewEmitter(c kubernetes.Interface, namespace string) *Emitter {
	return &Emitter{client: c, namespace: namespace}
}

// Apply creates the policy, or updates the existing one of the same name:
// re-running a launch never leaves two policies for one Pod. It returns the
// object as stored by the server.
//
// An update also drops owner references to Pods: they point at an earlier
// Pod of the same name, and once that Pod is gone the garbage collector
// would delete the policy out from under the new one. SetOwner adds the new
// Pod's reference once it exists.
func (e *Emitter) Apply(ctx context.Context, np *networkingv1.NetworkPolicy) (*networkingv1.NetworkPolicy, error) {
	if np.Namespace != "" && np.Namespace != e.namespace {
		return nil, fmt.Errorf("failed to apply networkpolicy %s: it is for namespace %q, the emitter for %q", np.Name, np.Namespace, e.namespace)
	}
	api := e.client.NetworkingV1().NetworkPolicies(e.namespace)
	want := np.DeepCopy()
	want.Namespace = e.namespace
	want.ResourceVersion, want.UID = "", ""

	// Create and update race with other writers (and with a Delete of the
	// previous run): a few rounds settle it, a bounded loop keeps a bug
	// from spinning.
	var lastErr error
	for range 5 {
		created, err := api.Create(ctx, want, metav1.CreateOptions{FieldManager: FieldManager})
		if err == nil {
			return created, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("failed to create networkpolicy %s/%s: %w", e.namespace, want.Name, err)
		}
		var updated *networkingv1.NetworkPolicy
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := api.Get(ctx, want.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if cur.Labels[ManagedByLabel] != ManagedBy {
				return fmt.Errorf("networkpolicy %s/%s exists and is %w (label %s=%s missing); delete or rename it",
					e.namespace, want.Name, ErrNotManaged, ManagedByLabel, ManagedBy)
			}
			next := cur.DeepCopy()
			next.Labels = want.Labels
			next.Annotations = want.Annotations
			next.Spec = want.Spec
			next.OwnerReferences = withoutPodOwners(cur.OwnerReferences)
			updated, err = api.Update(ctx, next, metav1.UpdateOptions{FieldManager: FieldManager})
			return err
		})
		if err == nil {
			return updated, nil
		}
		if errors.Is(err, ErrNotManaged) {
			return nil, fmt.Errorf("failed to update networkpolicy: %w", err)
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("failed to update networkpolicy %s/%s: %w", e.namespace, want.Name, err)
		}
		lastErr = err // deleted between our create and get: create again
	}
	return nil, fmt.Errorf("failed to apply networkpolicy %s/%s: it kept disappearing: %w", e.namespace, want.Name, lastErr)
}

func withoutPodOwners(refs []metav1.OwnerReference) []metav1.OwnerReference {
	var out []metav1.OwnerReference
	for _, r := range refs {
		if r.APIVersion == "v1" && r.Kind == "Pod" {
			continue
		}
		out = append(out, r)
	}
	return out
}

// SetOwner makes the Pod the owner of the policy, so that deleting the Pod
// (by the launcher, by hand, or after a crashed launcher) lets the garbage
// collector delete the policy too. Calling it again for the same Pod
// changes nothing: owner references merge on the Pod's UID.
func (e *Emitter) SetOwner(ctx context.Context, policyName string, pod *corev1.Pod) error {
	if pod == nil || pod.Name == "" || pod.UID == "" {
		return fmt.Errorf("failed to set the owner of networkpolicy %s: the pod has no name or UID (set the owner after creating the pod)", policyName)
	}
	if pod.Namespace != "" && pod.Namespace != e.namespace {
		// Owner references cannot cross namespaces: the garbage collector
		// would treat the owner as missing and delete the policy.
		return fmt.Errorf("failed to set the owner of networkpolicy %s/%s: pod %s is in namespace %q", e.namespace, policyName, pod.Name, pod.Namespace)
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{
			"ownerReferences": []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "Pod",
				Name:       pod.Name,
				UID:        pod.UID,
				// No controller / blockOwnerDeletion: the policy does not
				// need to hold the Pod's deletion, and setting
				// blockOwnerDeletion needs rights on pods/finalizers.
			}},
		},
	})
	if err != nil {
		return fmt.Errorf("failed to encode owner reference: %w", err)
	}
	_, err = e.client.NetworkingV1().NetworkPolicies(e.namespace).Patch(ctx, policyName, types.StrategicMergePatchType, patch,
		metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("failed to set pod %s as owner of networkpolicy %s/%s: %w", pod.Name, e.namespace, policyName, err)
	}
	return nil
}

// Delete removes the policy. A policy already gone (deleted by the garbage
// collector or a previous cleanup) is success.
func (e *Emitter) Delete(ctx context.Context, policyName string) error {
	err := e.client.NetworkingV1().NetworkPolicies(e.namespace).Delete(ctx, policyName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("failed to delete networkpolicy %s/%s: %w", e.namespace, policyName, err)
	}
	return nil
}
