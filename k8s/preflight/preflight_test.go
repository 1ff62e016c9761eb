package preflight

import (
	"context"
	"errors"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeAuthorizer answers SelfSubjectAccessReviews from a set of granted
// "verb resource" strings, and SelfSubjectReviews with user. The real
// authorizer (RBAC) answers them in integration/k8s_apiserver_test.go.
func fakeAuthorizer(user string, granted ...string) *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		ra := r.Spec.ResourceAttributes
		p := Permission{Group: ra.Group, Resource: ra.Resource, Subresource: ra.Subresource, Verb: ra.Verb}
		for _, g := range granted {
			if g == p.String() && ra.Namespace == "ns1" {
				r.Status.Allowed = true
			}
		}
		return true, r, nil
	})
	cs.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		if user == "" {
			return true, nil, errors.New("not served")
		}
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{UserInfo: authenticationv1.UserInfo{Username: user}}}, nil
	})
	return cs
}

func all() []string {
	var s []string
	for _, p := range Launch {
		s = append(s, p.String())
	}
	return s
}

func TestCheck(t *testing.T) {
	podsOnly := []string{"create pods", "get pods", "delete pods", "get pods/log"}
	tests := []struct {
		name        string
		user        string
		granted     []string
		wantMissing []string
		wantMsg     []string
	}{
		{name: "everything granted", granted: all()},
		{
			name: "no networkpolicy rights", user: "limited", granted: podsOnly,
			wantMissing: []string{"create networkpolicies.networking.k8s.io", "get networkpolicies.networking.k8s.io", "update networkpolicies.networking.k8s.io", "patch networkpolicies.networking.k8s.io", "delete networkpolicies.networking.k8s.io"},
			wantMsg: []string{
				`user "limited" may not do what sforge needs in namespace "ns1"`,
				"missing networkpolicies.networking.k8s.io: create, get, update, patch, delete;",
				"kubectl -n ns1 create role sforge --resource=networkpolicies.networking.k8s.io --verb=create,get,update,patch,delete",
				"kubectl -n ns1 create rolebinding sforge --role=sforge --user=limited",
			},
		},
		{
			name: "only update and logs missing, service account", user: "system:serviceaccount:ci:runner",
			granted:     []string{"create networkpolicies.networking.k8s.io", "get networkpolicies.networking.k8s.io", "patch networkpolicies.networking.k8s.io", "delete networkpolicies.networking.k8s.io", "create pods", "get pods", "delete pods"},
			wantMissing: []string{"update networkpolicies.networking.k8s.io", "get pods/log"},
			wantMsg: []string{
				"missing networkpolicies.networking.k8s.io: update; pods/log: get;",
				"--resource=networkpolicies.networking.k8s.io --verb=update; --resource=pods/log --verb=get",
				"--serviceaccount=ci:runner",
			},
		},
		{
			name: "nothing, user unknown", granted: nil, wantMissing: all(),
			wantMsg: []string{"the kubeconfig's user may not", "--user=<user>"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check(context.Background(), fakeAuthorizer(tt.user, tt.granted...), "ns1", Launch)
			if tt.wantMissing == nil {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				return
			}
			var me *MissingError
			if !errors.As(err, &me) {
				t.Fatalf("Check = %v, want *MissingError", err)
			}
			var got []string
			for _, p := range me.Missing {
				got = append(got, p.String())
			}
			if strings.Join(got, "|") != strings.Join(tt.wantMissing, "|") {
				t.Errorf("missing %q, want %q", got, tt.wantMissing)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("message spans lines: %q", msg)
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(msg, w) {
					t.Errorf("message %q\nlacks %q", msg, w)
				}
			}
		})
	}
}

func TestCheckReviewFailure(t *testing.T) {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	err := Check(context.Background(), cs, "ns1", Launch)
	var me *MissingError
	if err == nil || errors.As(err, &me) || !strings.Contains(err.Error(), "failed to check permissions") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Check with a failing server = %v", err)
	}
	if err := Check(context.Background(), cs, "", Launch); err == nil || !strings.Contains(err.Error(), "namespace is required") {
		t.Errorf("Check without namespace = %v", err)
	}
}
