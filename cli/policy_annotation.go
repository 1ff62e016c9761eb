package cli

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"github.com/sforge-dev/netiso/policy"
)

// policyAnnotationOptions are the flags of `sforge policy annotation`.
type policyAnnotationOptions struct {
	judgeURL string
	apiURLs  []string
	dns      []string
	action   string
	env      bool
	timeout  time.Duration

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
A URL without a port uses 80 (http) or 443 (https).`,
		Example: `  # Judge and Anthropic's API
  sforge policy annotation --judge-url http://10.0.0.12:8080 --api-url https://api.anthropic.com

  # Docker 20.10 (API < 1.43) drops annotations: use the environment form
  docker run --runtime sforge -e "$(sforge policy annotation --env --judge-url http://10.0.0.12:8080)" IMAGE

  # podman, with the hooks.d registration
  podman run --annotation "$(sforge policy annotation --judge-url http://10.0.0.12:8080)" IMAGE`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.complete(cmd.Context()); err != nil {
				return err
			}
			return o.run(s)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.judgeURL, "judge-url", "", "URL of the Judge server (required), e.g. http://10.0.0.12:8080")
	f.StringArrayVar(&o.apiURLs, "api-url", nil, "URL of the agent API or of a `sforge proxy` in front of it (repeatable)")
	f.StringArrayVar(&o.dns, "dns", nil, "IPv4 address of a DNS resolver to allow on port 53 (repeatable; 127.0.0.11 is Docker's embedded one)")
	f.StringVar(&o.action, "action", string(policy.Reject), "what happens to forbidden traffic: reject (immediate error) or drop (silent)")
	f.BoolVar(&o.env, "env", false, "print the environment form "+policy.EnvVar+"=VALUE instead of the annotation")
	f.DurationVar(&o.timeout, "resolve-timeout", policy.DefaultResolveTimeout, "how long resolving the URLs' hostnames may take")
	return cmd
}

func (o *policyAnnotationOptions) complete(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.judgeURL == "" {
		return fmt.Errorf("--judge-url is required")
	}
	targets := []policy.Target{}
	judge, err := policy.ParseTarget("--judge-url", o.judgeURL)
	if err != nil {
		return err
	}
	targets = append(targets, judge)
	for _, u := range o.apiURLs {
		t, err := policy.ParseTarget("--api-url", u)
		if err != nil {
			return err
		}
		targets = append(targets, t)
	}
	action, err := policy.ParseAction(o.action)
	if err != nil {
		return fmt.Errorf("--action: %w", err)
	}
	if o.timeout <= 0 {
		return fmt.Errorf("--resolve-timeout must be positive, got %s", o.timeout)
	}
	var dns []netip.Addr
	for _, d := range o.dns {
		a, err := netip.ParseAddr(d)
		if err != nil || !a.Is4() {
			return fmt.Errorf("--dns %q: want an IPv4 address", d)
		}
		dns = append(dns, a)
	}
	endpoints, _, err := policy.Resolve(ctx, o.resolver, o.timeout, targets...)
	if err != nil {
		return err
	}
	o.allowlist = policy.Allowlist{Endpoints: endpoints, DNS: dns, Action: action}
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
