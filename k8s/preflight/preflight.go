// Package preflight checks, before anything is created, that the kubeconfig
// sforge was given may do everything an isolated launch needs, and says
// exactly what is missing otherwise. Without it a launch with too few rights
// would fail half-way: the Pod created but its NetworkPolicy refused, or the
// policy created and never deleted.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Permission is one verb on one resource, optionally a subresource
// ("pods/log").
type Permission struct {
	Group       string // "" for the core group
	Resource    string
	Subresource string
	Verb        string
}

// ResourceName is the resource as RBAC and kubectl write it:
// "networkpolicies.networking.k8s.io", "pods", "pods/log".
func (p Permission) ResourceName() string {
	r := p.Resource
	if p.Group != "" {
		r += "." + p.Group
	}
	if p.Subresource != "" {
		r += "/" + p.Subresource
	}
	return r
}

func (p Permission) String() string { return p.Verb + " " + p.ResourceName() }

func perms(group, resource, sub string, verbs ...string) []Permission {
	var out []Permission
	for _, v := range verbs {
		out = append(out, Permission{Group: group, Resource: resource, Subresource: sub, Verb: v})
	}
	return out
}

// Launch is what `sforge run --backend k8s` needs in its namespace: create,
// read, update (a re-run updates the existing one), patch (the owner
// reference to the Pod, netpol.SetOwner) and delete its NetworkPolicy;
// create, read and delete the Work Pod; read its logs.
var Launch = slices.Concat(
	perms("networking.k8s.io", "networkpolicies", "", "create", "get", "update", "patch", "delete"),
	perms("", "pods", "", "create", "get", "delete"),
	perms("", "pods", "log", "get"),
)

// MissingError lists the permissions the kubeconfig's user lacks in a
// namespace. Its message names each missing verb per resource and the RBAC
// grant that fixes it.
type MissingError struct {
	Namespace string
	// User is the user name the API server sees, when it could be asked.
	User    string
	Missing []Permission
	// Reasons are the authorizer's explanations, when it gave any.
	Reasons []string
}

func (e *MissingError) Error() string {
	// Group verbs by resource, in the order of the check list.
	var resources []string
	verbs := map[string][]string{}
	for _, p := range e.Missing {
		r := p.ResourceName()
		if _, ok := verbs[r]; !ok {
			resources = append(resources, r)
		}
		verbs[r] = append(verbs[r], p.Verb)
	}
	var parts, rules []string
	for _, r := range resources {
		parts = append(parts, r+": "+strings.Join(verbs[r], ", "))
		rules = append(rules, fmt.Sprintf("--resource=%s --verb=%s", r, strings.Join(verbs[r], ",")))
	}
	who := "the kubeconfig's user"
	subject := "--user=<user>"
	if e.User != "" {
		who = fmt.Sprintf("user %q", e.User)
		subject = "--user=" + e.User
		if strings.HasPrefix(e.User, "system:serviceaccount:") {
			// kubectl wants NAMESPACE:NAME, which is what follows the prefix.
			subject = "--serviceaccount=" + strings.TrimPrefix(e.User, "system:serviceaccount:")
		}
	}
	fix := "grant them with a Role and RoleBinding in that namespace"
	if len(rules) == 1 {
		fix = fmt.Sprintf("grant them with `kubectl -n %s create role sforge %s` and `kubectl -n %s create rolebinding sforge --role=sforge %s`",
			e.Namespace, rules[0], e.Namespace, subject)
	} else {
		fix += fmt.Sprintf(" (one rule per resource: %s; bind it with `kubectl -n %s create rolebinding sforge --role=sforge %s`)",
			strings.Join(rules, "; "), e.Namespace, subject)
	}
	return fmt.Sprintf("%s may not do what sforge needs in namespace %q: missing %s; %s",
		who, e.Namespace, strings.Join(parts, "; "), fix)
}

// Check asks the API server, with one SelfSubjectAccessReview per
// permission (sent concurrently), whether the client's user has every
// permission in namespace; nil means all are granted. A *MissingError lists
// what is not. Any authenticated user may create SelfSubjectAccessReviews,
// so an error from the reviews themselves means the server is unreachable
// or the credentials are invalid.
func Check(ctx context.Context, c kubernetes.Interface, namespace string, need []Permission) error {
	if namespace == "" {
		return fmt.Errorf("failed to check permissions: namespace is required")
	}
	type result struct {
		allowed bool
		reason  string
		err     error
	}
	results := make([]result, len(need))
	var wg sync.WaitGroup
	for i, p := range need {
		wg.Go(func() {
			review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace:   namespace,
					Verb:        p.Verb,
					Group:       p.Group,
					Resource:    p.Resource,
					Subresource: p.Subresource,
				},
			}}
			got, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
			if err != nil {
				results[i] = result{err: fmt.Errorf("%s: %w", p, err)}
				return
			}
			results[i] = result{allowed: got.Status.Allowed, reason: got.Status.Reason}
		})
	}
	wg.Wait()

	var errs []error
	missing := &MissingError{Namespace: namespace}
	for i, r := range results {
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
		case !r.allowed:
			missing.Missing = append(missing.Missing, need[i])
			if r.reason != "" && !slices.Contains(missing.Reasons, r.reason) {
				missing.Reasons = append(missing.Reasons, r.reason)
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("failed to check permissions in namespace %q (is the API server reachable and the kubeconfig valid?): %w",
			namespace, errors.Join(errs...))
	}
	if len(missing.Missing) == 0 {
		return nil
	}
	// Best effort: name the user in the fix. SelfSubjectReview is GA since
	// Kubernetes 1.28; on failure the message says <user>.
	if ssr, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
		missing.User = ssr.Status.UserInfo.Username
	}
	return missing
}
