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
