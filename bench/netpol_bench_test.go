package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sforge-dev/netiso/internal/testk8s"
	"github.com/sforge-dev/netiso/k8s/client"
	"github.com/sforge-dev/netiso/k8s/netpol"
	"github.com/sforge-dev/netiso/policy"
)

const (
	netpolCount   = 500 // per-Pod policies created, then deleted, per round
	netpolWorkers = 16  // concurrent launches of a batch
)

// BenchmarkNetpolEmission creates and then deletes 500 per-Pod
// NetworkPolicies through netpol.Emitter against a real kube-apiserver +
// etcd, with 16 launches in flight, once with sforge's client settings
// (k8s/client: 50 QPS, burst 100) and once with client-go's defaults
// (5 QPS, burst 10), interleaved in the same run; a third client without
// any client-side limit shows what the server sustains. Reported: policies
// per second for each phase and client, and sforge's speed-up over the
// defaults.
//
//	make k8s-bins && go test -run '^$' -bench NetpolEmission -benchtime 1x -timeout 30m ./bench/
func BenchmarkNetpolEmission(b *testing.B) {
	c := testk8s.Start(b, testk8s.Options{})
	admin := c.Client(b, testk8s.Admin)
	allow, err := policy.Decode("v1;tcp:10.0.0.12:8080;tcp:160.79.104.10:443;dns:10.96.0.10")
	if err != nil {
		b.Fatal(err)
	}
	variants := []struct {
		name string
		cfg  *rest.Config
	}{
		{"sforge", client.Tune(c.Config(testk8s.Admin), client.Options{})},
		{"client-go-default", c.Config(testk8s.Admin)}, // QPS/Burst zero: 5 and 10
		// No client-side limit: what the server itself sustains, to show
		// how far below it sforge's limit sits.
		{"unthrottled", client.Tune(c.Config(testk8s.Admin), client.Options{QPS: -1})},
	}
	type total struct{ create, delete time.Duration }
	totals := make([]total, len(variants))
	ctx := context.Background()

	for i := 0; i < b.N; i++ {
		for v, variant := range variants {
			ns := fmt.Sprintf("bench-%s-%d", variant.name, i)
			if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
			cs, err := kubernetes.NewForConfig(variant.cfg)
			if err != nil {
				b.Fatal(err)
			}
			e := netpol.NewEmitter(cs, ns)
			names := make([]string, netpolCount)
			start := time.Now()
			run(b, func(j int) error {
				np, err := netpol.Build(allow, netpol.Options{Namespace: ns, Pod: fmt.Sprintf("agent-%d", j)})
				if err != nil {
					return err
				}
				names[j] = np.Name
				_, err = e.Apply(ctx, np)
				return err
			})
			created := time.Since(start)
			// Checked with the admin client: not counted, not throttled.
			if l, err := admin.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != netpolCount {
				b.Fatalf("%s: %v policies after create (err %v)", variant.name, len(l.Items), err)
			}
			start = time.Now()
			run(b, func(j int) error { return e.Delete(ctx, names[j]) })
			deleted := time.Since(start)
			if l, err := admin.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
				b.Fatalf("%s: %v policies left after delete (err %v)", variant.name, len(l.Items), err)
			}
			totals[v].create += created
			totals[v].delete += deleted
			b.Logf("round %d %-18s create %4d in %7.2fs (%6.1f/s)  delete in %7.2fs (%6.1f/s)", i, variant.name,
				netpolCount, created.Seconds(), rate(created), deleted.Seconds(), rate(deleted))
		}
	}
	n := float64(b.N)
	for v, variant := range variants {
		b.ReportMetric(rate(totals[v].create/time.Duration(n)), variant.name+"-create/s")
		b.ReportMetric(rate(totals[v].delete/time.Duration(n)), variant.name+"-delete/s")
	}
	b.ReportMetric(totals[1].create.Seconds()/totals[0].create.Seconds(), "create-speedup-x")
	b.ReportMetric(totals[1].delete.Seconds()/totals[0].delete.Seconds(), "delete-speedup-x")
}

func rate(d time.Duration) float64 { return netpolCount / d.Seconds() }

// run calls f for 0..netpolCount-1 from netpolWorkers goroutines and fails
// the benchmark on the first error.
func run(b *testing.B, f func(int) error) {
	b.Helper()
	jobs := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range netpolWorkers {
		wg.Go(func() {
			for j := range jobs {
				if err := f(j); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for j := range netpolCount {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}
