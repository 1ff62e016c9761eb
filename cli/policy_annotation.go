package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/sforge-dev/netiso/policy"
)

// policyAnnotationOptions are the flags of `sforge policy annotation`.
type policyAnnotationOptions struct {
	allowlistFlags
	env bool

	resolver  policy.Resolver
	allowlist policy.Allowlist
}

func newCmdPolicyAnnotation(s Streams, r policy.Resolver) *cobra.Command {
	o := &policyAnnotationOptions{resolver: r}
	cmd := &cobra.Command{
		Use:   "annotation --judge-url URL [--api-url URL]... [--dns IP]... [--env]",
		Short: "Print the allowlist annotation (or env form) for docker/podman/ctr run",
		Long: `Print the allowlist as one line, ready to paste after --annotation (or -e with --env).

Hostnames in the URLs are resolved to IPv4 now, on this machine, and the
addresses are what the container may reach: the container itself needs no DNS.
A URL without a port uses 80 (http) or 443 (https).

With --own-resolver the container gets a resolver of its own, in its network
namespace, that answers the URLs' names with those addresses and refuses every
other name without forwarding it; the audit log records the names refused. It is
started by sforge-hook on Docker, podman and containerd, and by sforge-cni for a
Pod; point the container's DNS at it (docker run --dns 127.0.0.53, or a Pod's
dnsPolicy: None with dnsConfig.nameservers [127.0.0.53]).`,
		Example: `  # Judge and Anthropic's API
  sforge policy annotation --judge-url http://10.0.0.12:8080 --api-url https://api.anthropic.com

  # Docker 20.10 (API < 1.43) drops annotations: use the environment form
  docker run --runtime sforge -e "$(sforge policy annotation --env --judge-url http://10.0.0.12:8080)" IMAGE

  # podman, with the hooks.d registration
  podman run --annotation "$(sforge policy annotation --judge-url http://10.0.0.12:8080)" IMAGE

  # a resolver of the container's own: the Judge's name resolves, every other
  # name is refused and recorded in the audit log
  docker run --runtime sforge --dns 127.0.0.53 --dns-search . \
    -e "$(sforge policy annotation --env --own-resolver --judge-url http://judge.internal:8080)" IMAGE`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.complete(cmd.Context()); err != nil {
				return err
			}
			return o.run(s)
		},
	}
	f := cmd.Flags()
	o.allowlistFlags.add(f)
	f.BoolVar(&o.env, "env", false, "print the environment form "+policy.EnvVar+"=VALUE instead of the annotation")
	return cmd
}

func (o *policyAnnotationOptions) complete(ctx context.Context) error {
	a, err := o.allowlistFlags.resolve(ctx, o.resolver)
	if err != nil {
		return err
	}
	o.allowlist = a
	return nil
}

func (o *policyAnnotationOptions) run(s Streams) error {
	value, err := policy.Encode(o.allowlist)
	if err != nil {
		return err
	}
	if o.env {
		_, err = fmt.Fprintln(s.Out, policy.EnvAssignment(value))
	} else {
		_, err = fmt.Fprintln(s.Out, policy.AnnotationAssignment(value))
	}
	return err
}
