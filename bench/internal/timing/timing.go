// Package timing summarises benchmark samples: the benchmarks here run
// contenders interleaved, collect one duration per round each, and report
// medians, 95th percentiles and ratios between contenders.
package timing

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Samples are the durations of one contender, one per round.
type Samples []time.Duration

// Quantile returns the q-quantile (0..1) by nearest rank; zero when empty.
func (s Samples) Quantile(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	i := int(q*float64(len(c))+0.5) - 1
	return c[max(0, min(i, len(c)-1))]
}

// Median is the 0.5-quantile.
func (s Samples) Median() time.Duration { return s.Quantile(0.5) }

// P95 is the 0.95-quantile.
func (s Samples) P95() time.Duration { return s.Quantile(0.95) }

// Ratio is a's median over b's.
func Ratio(a, b Samples) float64 {
	if b.Median() == 0 {
		return 0
	}
	return float64(a.Median()) / float64(b.Median())
}

// PairedRatio is the median of a[i]/b[i]: for contenders measured in the
// same rounds (a[i] and b[i] from round i), it cancels the load that
// drifts from round to round on a shared machine, which a ratio of
// medians does not. Zero when the lengths differ or are zero.
func PairedRatio(a, b Samples) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return 0
	}
	r := make([]float64, len(a))
	for i := range a {
		if b[i] == 0 {
			return 0
		}
		r[i] = float64(a[i]) / float64(b[i])
	}
	slices.Sort(r)
	if len(r)%2 == 1 {
		return r[len(r)/2]
	}
	return (r[len(r)/2-1] + r[len(r)/2]) / 2
}

// Ms formats a duration in milliseconds with three decimals.
func Ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// Us formats a duration in microseconds with one decimal.
func Us(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond)) }

// Orders gives each round's order of n contenders: a seeded shuffle, so
// that no contender always runs right after the same other one (whose
// cleanup the kernel may still be finishing), and a rerun repeats it.
func Orders(n int) func() []int {
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	return func() []int { return rng.Perm(n) }
}
