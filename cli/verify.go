package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/sforge-dev/netiso/launcher"
	"github.com/sforge-dev/netiso/launcher/docker"
	"github.com/sforge-dev/netiso/launcher/verify"
	"github.com/sforge-dev/netiso/policy"
)

// VerifyFailedExitCode is the exit status when isolation is not verified.
const VerifyFailedExitCode = 1

type verifyOptions struct {
	req        verify.Request
	output     string
	resolveTTL time.Duration

	newBackend backendFactory
	resolver   policy.Resolver
	diagnoser  func(backend string) verify.Diagnoser
}

func newCmdVerify(s Streams) *cobra.Command {
	return newCmdVerifyWith(s, verifyBackends, net.DefaultResolver)
}

// verifyBackends makes verify's backend. It is verify's own (run's
// factory grows Kubernetes flags) and knows Docker only for now; the
// Kubernetes backend joins here together with its verify.Diagnoser.
func verifyBackends(name string) (launcher.Backend, error) {
	if name != "docker" {
		return nil, fmt.Errorf("--backend %q: sforge verify supports docker in this build", name)
	}
	api, err := docker.NewClient()
	if err != nil {
		return nil, fmt.Errorf("failed to create the Docker client: %w", err)
	}
	return docker.New(api), nil
}

func newCmdVerifyWith(s Streams, backends backendFactory, r policy.Resolver) *cobra.Command {
	o := &verifyOptions{newBackend: backends, resolver: r, diagnoser: func(string) verify.Diagnoser { return nil }}
	cmd := &cobra.Command{
		Use:   "verify --judge-url URL [--api-url URL] [--canary HOST:PORT] [--backend docker|k8s] [-o table|json]",
		Short: "Prove the isolation works here: run a hostile probe under exactly what `sforge run` applies",
		Long: `Run sforge-probe in a Work container isolated exactly as ` + "`sforge run --disable-internet`" + `
would isolate an agent (same runtime, capabilities, allowlist and pinned
hosts), let it try every way out, and report each attempt:

  - positive controls: the Judge (--judge-url) and the API (--api-url) are reachable;
  - refused: TCP/UDP/ICMP to --canary's host, the allowed hosts on other
    ports, IPv6 (global and link-local), DNS to 127.0.0.11 and other servers,
    the gateway's other ports, 169.254.169.254, --neighbour addresses, raw and
    AF_PACKET sockets, changing nftables from inside, unshare of a new netns.

It exits 0 when every escape was refused and every control passed, 1 when
anything leaked, a control failed or the probe could not run (for example
the sforge runtime is not registered: run ` + "`sforge install --docker`" + `), 2 on a
usage error. Run it once after installing, and after changing the runtime.

The probe image is built FROM scratch with the static sforge-probe found
next to sforge (or --probe); --image uses an image that has it at /sforge-probe.`,
		Example: `  # Docker: the Judge on the host, a canary that must stay unreachable
  sforge verify --judge-url http://host.docker.internal:8080 --canary 203.0.113.10:80

  # Also require the API proxy to be reachable, JSON report for CI
  sforge verify --judge-url http://10.0.0.12:8080 --api-url http://host.docker.internal:9090 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return usageError(err)
			}
			return o.run(cmd.Context(), s)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.req.Backend, "backend", "docker", "where the probe runs: docker or k8s")
	f.StringVar(&o.req.JudgeURL, "judge-url", "", "URL of the Judge, reachable from the container (required): a positive control")
	f.StringVar(&o.req.APIURL, "api-url", "", "URL of the AI API (or the sforge proxy) the container must reach: a positive control")
	f.StringVar(&o.req.Canary, "canary", "", "HOST:PORT the container must NOT reach (TCP, UDP, ICMP to its host), e.g. a server you run outside")
	f.StringArrayVar(&o.req.Neighbours, "neighbour", nil, "address of another container or host that must be unreachable (repeatable)")
	f.StringArrayVar(&o.req.Forbidden6, "ipv6-target", nil, "IPv6 address that must be unreachable (repeatable)")
	f.StringVar(&o.req.Image, "image", "", "run the probe from this image (it must hold /sforge-probe) instead of building one")
	f.StringVar(&o.req.Probe, "probe", "", "the static sforge-probe binary to put in the image (default: next to sforge, else in PATH)")
	f.DurationVar(&o.req.AttemptTimeout, "attempt-timeout", 1500*time.Millisecond, "how long each attempt may take")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	f.DurationVar(&o.resolveTTL, "resolve-timeout", policy.DefaultResolveTimeout, "how long resolving the Judge and API hostnames may take")
	return cmd
}

func (o *verifyOptions) validate() error {
	switch o.req.Backend {
	case "docker":
	case "k8s":
		// The Kubernetes backend (launcher/k8s) plugs in here: its
		// launcher.Backend runs the probe Pod, and a verify.Diagnoser
		// reports whether the CNI enforces NetworkPolicy and whether
		// sforge-cni ran for the Pod.
		return errors.New("--backend k8s: the Kubernetes backend is not yet available in this build; use --backend docker")
	default:
		return fmt.Errorf("--backend %q: unknown backend (allowed: docker, k8s)", o.req.Backend)
	}
	switch o.output {
	case "table", "json":
	default:
		return fmt.Errorf("--output %q: unknown format (allowed: table, json)", o.output)
	}
	if o.req.JudgeURL == "" {
		return errors.New("--judge-url is required: the Judge is the positive control that proves the probe ran where agents run, e.g. --judge-url http://host.docker.internal:8080")
	}
	if o.req.AttemptTimeout <= 0 || o.req.AttemptTimeout > 10*time.Second {
		return fmt.Errorf("--attempt-timeout must be in (0, 10s], got %s", o.req.AttemptTimeout)
	}
	if o.resolveTTL <= 0 {
		return fmt.Errorf("--resolve-timeout must be positive, got %s", o.resolveTTL)
	}
	if o.req.Image == "" && o.req.Probe == "" {
		o.req.Probe = verify.FindProbe()
		if o.req.Probe == "" {
			return errors.New("sforge-probe not found next to sforge or in PATH: build it (`make build`), pass --probe PATH, or --image with an image holding /sforge-probe")
		}
	}
	if _, err := verify.MatrixConfig(o.req); err != nil {
		return err
	}
	return nil
}

func (o *verifyOptions) run(ctx context.Context, s Streams) error {
	if ctx == nil {
		ctx = context.Background()
	}
	b, err := o.newBackend(o.req.Backend)
	if err != nil {
		return err
	}
	rep, err := verify.Run(ctx, b, o.req, verify.Options{
		Resolver:       o.resolver,
		ResolveTimeout: o.resolveTTL,
		Log:            s.ErrOut,
		Diagnoser:      o.diagnoser(o.req.Backend),
	})
	if err != nil {
		var ue *launcher.UsageError
		if errors.As(err, &ue) {
			return usageError(err)
		}
		return err
	}
	switch o.output {
	case "json":
		enc := json.NewEncoder(s.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	default:
		if err := rep.WriteTable(s.Out); err != nil {
			return err
		}
	}
	if !rep.OK {
		return &ExitError{Code: VerifyFailedExitCode, Err: errors.New(rep.Summary())}
	}
	return nil
}
