package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/internal/testbundle"
	"github.com/sforge-dev/netiso/policy"
)

// concurrent is how many containers start at once (the 32).
const concurrent = 32

// concurrentChecks is what each of them probes: the judge reachable, the
// internet and the judge's other port not.
var concurrentChecks = map[string]bool{"tcp " + regJudgeTCP: true, "tcp " + regInternetTCP: false, "tcp " + regJudgeOther: false}

// TestConcurrentHookIPTables: 32 runc containers whose hooks install with
// the iptables engines at the same moment, so that they contend for the
// xtables lock: every hook succeeds (none refused on lock contention) and
// every container runs. (Timing under this load is the performance
// issue's; here only correctness is asserted.)
func TestConcurrentHookIPTables(t *testing.T) {
	requireRunc(t)
	r := testbundle.NewRunc(t)
	for _, eng := range []string{engines.IPTablesNFT, engines.IPTablesLegacy} {
		t.Run(eng, func(t *testing.T) {
			bundles := make([]*testbundle.Bundle, concurrent)
			for i := range bundles {
				bundles[i] = testbundle.New(t, testbundle.Options{
					Annotations: map[string]string{policy.AnnotationKey: faultAllow},
					Checks:      []string{"loopback", "127.0.0.1"},
					Hook:        true, HookArgs: hookArgs(eng),
					Edit: func(s *specs.Spec) {
						s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
					},
				})
			}
			results := make([]testbundle.Result, concurrent)
			var wg sync.WaitGroup
			t0 := time.Now()
			for i := range bundles {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = r.Run(t, bundles[i], fmt.Sprintf("conc-%s-%d", eng, i))
				}()
			}
			wg.Wait()
			t.Logf("%d containers with %s hooks in %s", concurrent, eng, time.Since(t0).Round(time.Millisecond))
			for i, b := range bundles {
				if results[i].Err != nil || !b.Ran() {
					t.Errorf("container %d: %v\n%s\nhook log:\n%s", i, results[i].Err, results[i].Output(), b.Log())
					continue
				}
				if !strings.Contains(b.Log(), "install container=") {
					t.Errorf("container %d: no install logged:\n%s", i, b.Log())
				}
			}
		})
	}
}

// TestConcurrentDocker: 32 isolated containers started at once through a
// real dockerd with the sforge runtime: each reaches the judge and not the
// internet or the judge's other port, none fails, no container and no
// SFORGE chain is left in dockerd's namespace afterwards.
func TestConcurrentDocker(t *testing.T) {
	prefix := regBinaries(t)
	regHostGuard(t)
	const image = "sforge-test/conc:1"
	d := regDockerWithSforge(t, prefix, image)
	probesAtOnce(t, concurrent, concurrentChecks, func(_ int, probe []string) (string, error) {
		return d.Docker(t.Context(), append([]string{"run", "--rm", "--runtime", "sforge", "-e", "SFORGE_EGRESS=" + regAllowlist, image}, probe...)...)
	})
	if left := strings.TrimSpace(d.MustDocker(t, "ps", "-aq")); left != "" {
		t.Errorf("containers left: %s", left)
	}
	if chains := regChains(t, d.NetNS); chains != "" {
		t.Errorf("SFORGE chains in dockerd's namespace:\n%s", chains)
	}
}
