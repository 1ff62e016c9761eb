package timing

import (
	"testing"
	"time"
)

func TestQuantiles(t *testing.T) {
	var s Samples
	for i := 1; i <= 20; i++ {
		s = append(s, time.Duration(21-i)*time.Millisecond)
	}
	if s.Median() != 10*time.Millisecond || s.P95() != 19*time.Millisecond || s.Quantile(1) != 20*time.Millisecond {
		t.Fatalf("median %v p95 %v max %v", s.Median(), s.P95(), s.Quantile(1))
	}
	if (Samples{}).Median() != 0 || (Samples{time.Second}).P95() != time.Second {
		t.Fatal("edge cases")
	}
	if r := Ratio(Samples{2 * time.Second}, Samples{time.Second}); r != 2 {
		t.Fatalf("ratio %v", r)
	}
}

func TestPairedRatio(t *testing.T) {
	ms := func(v ...int) Samples {
		var s Samples
		for _, x := range v {
			s = append(s, time.Duration(x)*time.Millisecond)
		}
		return s
	}
	// Round 3 is slow for both: the paired ratio is unaffected by it.
	if r := PairedRatio(ms(11, 12, 110), ms(10, 10, 100)); r < 1.099 || r > 1.101 {
		t.Fatalf("paired ratio %v, want 1.1", r)
	}
	if r := PairedRatio(ms(1, 2), ms(1, 1)); r != 1.5 {
		t.Fatalf("even count: %v", r)
	}
	if PairedRatio(ms(1), ms(1, 2)) != 0 || PairedRatio(nil, nil) != 0 || PairedRatio(ms(1), ms(0)) != 0 {
		t.Fatal("edge cases")
	}
}
