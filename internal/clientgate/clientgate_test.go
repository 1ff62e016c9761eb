package clientgate

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	lan := []netip.Prefix{netip.MustParsePrefix("172.17.0.0/16")}
	if r := New(lan, false).Refused(context.Background(), "172.17.0.9:4000"); r != "" {
		t.Errorf("a client of the network: %q", r)
	}
	for _, remote := range []string{"10.0.0.1:4000", "nonsense"} {
		if r := New(lan, false).Refused(context.Background(), remote); r == "" {
			t.Errorf("%s admitted", remote)
		}
	}
	if r := (&Gate{}).Refused(context.Background(), "172.17.0.9:4000"); r == "" {
		t.Error("the zero gate admitted a client")
	}

	g := New(lan, true)
	got := make(chan string, 2)
	go func() { got <- g.Refused(context.Background(), "172.17.0.2:4000") }()
	go func() { got <- g.Refused(context.Background(), "[::ffff:172.17.0.3]:4000") }()
	select {
	case r := <-got:
		t.Fatalf("decided before the workload was known: %q", r)
	case <-time.After(200 * time.Millisecond):
	}
	g.Admit(netip.MustParseAddr("172.17.0.2"))
	g.Admit(netip.MustParseAddr("172.17.0.3")) // ignored: the first call counts
	a, b := <-got, <-got
	if (a == "") == (b == "") || (a != "" && a != "not the workload's address") || (b != "" && b != "not the workload's address") {
		t.Errorf("the workload and its neighbour: %q, %q", a, b)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if r := New(lan, true).Refused(ctx, "172.17.0.2:4000"); r != "gone before the workload's address was known" {
		t.Errorf("client gone: %q", r)
	}
	none := New(lan, true)
	none.Admit()
	if r := none.Refused(context.Background(), "172.17.0.2:4000"); r != "not the workload's address" {
		t.Errorf("admitted nobody: %q", r)
	}
}
