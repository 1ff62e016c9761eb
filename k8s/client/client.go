// Package client builds the Kubernetes clientset every sforge component uses
// (launcher, NetworkPolicy emitter, pre-flight, admission installer, CNI
// plugin fallback), from a kubeconfig and with a rate limit suited to
// batches.
//
// Why a rate limit of our own: client-go throttles every rest.Config left at
// zero to 5 requests per second with a burst of 10 (rest.DefaultQPS and
// rest.DefaultBurst). One isolated launch costs about a dozen requests
// (pre-flight access reviews, create policy, create Pod, set owner, watch,
// logs, delete Pod, delete policy), so with the defaults a batch of 50
// launches sharing one process spends most of its time waiting in the
// client's own token bucket while the API server sits idle (BENCHMARKS.md:
// "NetworkPolicy emission"). The server protects itself with API Priority
// and Fairness, which queues or answers 429 per user and priority level, and
// client-go retries 429s with the server's Retry-After; so the client-side
// limit only needs to stop a runaway loop, not to pace normal work. 50 QPS
// with a burst of 100 lets a batch start at once and still bounds a bug.
package client

import (
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// DefaultQPS is the sustained request rate the client allows itself.
	DefaultQPS float32 = 50
	// DefaultBurst is how many requests may go out at once before the
	// sustained rate applies; a batch of launches starts with a burst.
	DefaultBurst = 100
	// DefaultTimeout bounds each request, so that an unreachable API server
	// becomes an error instead of a hang.
	DefaultTimeout = 30 * time.Second
	// UserAgent names sforge in the API server's audit log.
	UserAgent = "sforge"
)

// Options select the kubeconfig and tune the client. The zero value uses the
// usual kubeconfig search (KUBECONFIG, then ~/.kube/config, then the
// in-cluster service account) and the defaults above.
type Options struct {
	// Kubeconfig is the path of a kubeconfig file; empty means the usual
	// search.
	Kubeconfig string
	// Context is the kubeconfig context to use; empty means current-context.
	Context string
	// QPS and Burst override DefaultQPS and DefaultBurst when positive.
	// A negative QPS disables client-side throttling entirely.
	QPS   float32
	Burst int
	// Timeout overrides DefaultTimeout when positive.
	Timeout time.Duration
}

// Loaded is a client ready to use, with the namespace the kubeconfig
// selects (its context's namespace, else "default").
type Loaded struct {
	Config    *rest.Config
	Clientset kubernetes.Interface
	Namespace string
}

// Load reads the kubeconfig and builds the clientset.
func Load(o Options) (*Loaded, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules.ExplicitPath = o.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: o.Context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("failed to load kubeconfig%s: %w", describe(o.Kubeconfig), err)
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("failed to read the namespace from kubeconfig%s: %w", describe(o.Kubeconfig), err)
	}
	cs, err := New(cfg, o)
	if err != nil {
		return nil, err
	}
	return &Loaded{Config: Tune(cfg, o), Clientset: cs, Namespace: ns}, nil
}

func describe(path string) string {
	if path == "" {
		return " (KUBECONFIG, ~/.kube/config or in-cluster)"
	}
	return " " + path
}

// Tune returns a copy of cfg with sforge's rate limit, timeout and user
// agent applied (fields of o override the defaults). The caller's config is
// not modified.
func Tune(cfg *rest.Config, o Options) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = DefaultQPS, DefaultBurst
	if o.QPS != 0 {
		c.QPS = o.QPS
	}
	if o.Burst > 0 {
		c.Burst = o.Burst
	}
	if c.Burst < int(c.QPS) {
		// A bucket smaller than one second of traffic would cap the rate
		// below QPS.
		c.Burst = int(c.QPS)
	}
	c.Timeout = DefaultTimeout
	if o.Timeout > 0 {
		c.Timeout = o.Timeout
	}
	if c.UserAgent == "" {
		c.UserAgent = UserAgent
	}
	return c
}

// New builds a clientset from cfg tuned by Tune. A client built this way
// must be shared by every goroutine of a process: the rate limiter lives in
// the clientset, so one clientset per launch would multiply the limit.
func New(cfg *rest.Config, o Options) (kubernetes.Interface, error) {
	cs, err := kubernetes.NewForConfig(Tune(cfg, o))
	if err != nil {
		return nil, fmt.Errorf("failed to build the Kubernetes client: %w", err)
	}
	return cs, nil
}
