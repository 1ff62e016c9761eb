package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sforge-dev/netiso/installer"
	"github.com/sforge-dev/netiso/k8s/admission"
	k8sclient "github.com/sforge-dev/netiso/k8s/client"
)

// admissionVerifyTimeout bounds the wait for the API server to load the
// policy after install (it does so asynchronously).
var admissionVerifyTimeout = time.Minute

// admission installs (then verifies) or deletes the ValidatingAdmissionPolicy
// of k8s/admission in the cluster the kubeconfig names.
func (o *registerOptions) admission(ctx context.Context, op installer.Op, w io.Writer) error {
	if o.dryRun {
		if op == installer.Install {
			fmt.Fprintf(w, "k8s-admission: would apply (same as `kubectl apply -f -`):\n%s\n", admission.Manifest())
		} else {
			fmt.Fprintf(w, "k8s-admission: would delete validatingadmissionpolicybinding and validatingadmissionpolicy %s\n", admission.Name)
		}
		return nil
	}
	l, err := k8sclient.Load(k8sclient.Options{Kubeconfig: o.kubeconfig})
	if err != nil {
		return err
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if op == installer.Uninstall {
		if err := admission.Delete(ctx, l.Clientset); err != nil {
			return err
		}
		fmt.Fprintf(w, "k8s-admission: deleted validatingadmissionpolicy %s and its binding from %s\n", admission.Name, l.Config.Host)
		return nil
	}
	if err := admission.Apply(ctx, l.Clientset); err != nil {
		return err
	}
	ns := o.namespace
	if ns == "" {
		ns = l.Namespace
	}
	if err := admission.Verify(ctx, l.Clientset, ns, admissionVerifyTimeout); err != nil {
		return fmt.Errorf("applied, but not in effect: %w", err)
	}
	fmt.Fprintf(w, "k8s-admission: validatingadmissionpolicy %s applied on %s and enforced (a dry-run Pod with the annotation and NET_ADMIN was refused in namespace %s)\n",
		admission.Name, l.Config.Host, ns)
	return nil
}
