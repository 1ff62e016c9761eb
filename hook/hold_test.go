package hook

import (
	"io"
	"strings"
	"testing"
	"time"
)

// The holder returns when its stdin ends (the hook exited), and on its own
// after holdTimeout when the end never comes.
func TestHoldReturns(t *testing.T) {
	done := make(chan struct{})
	r, w := io.Pipe()
	go func() { hold(r); close(done) }()
	select {
	case <-done:
		t.Fatal("hold returned while its stdin was open")
	case <-time.After(50 * time.Millisecond):
	}
	w.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("hold did not return at the end of stdin")
	}

	defer func(d time.Duration) { holdTimeout = d }(holdTimeout)
	holdTimeout = 20 * time.Millisecond
	r2, w2 := io.Pipe()
	defer w2.Close()
	finished := make(chan struct{})
	go func() { hold(r2); close(finished) }()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("hold did not give up after holdTimeout")
	}
}

// The holder mode is recognised before argument parsing and is silent.
func TestMainHoldMode(t *testing.T) {
	var stderr strings.Builder
	if code := Main([]string{"sforge-hook", HoldStage}, strings.NewReader(""), &stderr, func(string) string { return "" }); code != 0 || stderr.Len() != 0 {
		t.Fatalf("exit %d stderr %q", code, stderr.String())
	}
}
