package iptables

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMoveCounters(t *testing.T) {
	for in, want := range map[string]string{
		"[0:0] -A OUTPUT -j SFORGE_x":   "-A OUTPUT -j SFORGE_x -c 0 0",
		"[12:3456] -A SFORGE_x -j DROP": "-A SFORGE_x -j DROP -c 12 3456",
		"-A OUTPUT -j SFORGE_x":         "-A OUTPUT -j SFORGE_x",
		"-N SFORGE_x":                   "-N SFORGE_x",
		"[a:0] -A X":                    "[a:0] -A X",
		"[0:0]-A X":                     "[0:0]-A X",
		"[0] -A X":                      "[0] -A X",
		"":                              "",
	} {
		if got := moveCounters(in); got != want {
			t.Errorf("moveCounters(%q) = %q, want %q", in, got, want)
		}
	}
}

// A stand-in for iptables: prints its arguments for -S, exits 1 for a
// chain called missing (as iptables does), 2 for broken.
const fakeIPTables = `#!/bin/sh
case "$*" in
*missing*) echo "iptables: No chain/target/match by that name." >&2; exit 1 ;;
*broken*) echo "iptables: broken" >&2; exit 2 ;;
esac
echo "-N $4"
echo "[1:2] -A $4 $*"
`

func TestLister(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "iptables")
	if err := os.WriteFile(bin, []byte(fakeIPTables), 0o755); err != nil {
		t.Fatal(err)
	}
	l := lister{path: bin, timeout: 5 * time.Second}
	got, err := l.List("filter", "C")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-N C", "-A C -t filter -S C --wait 4 -c 1 2"}
	if !slices.Equal(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}
	if ok, err := l.ChainExists("filter", "C"); !ok || err != nil {
		t.Errorf("ChainExists(C) = %v, %v; want true", ok, err)
	}
	if ok, err := l.ChainExists("filter", "missing"); ok || err != nil {
		t.Errorf("ChainExists(missing) = %v, %v; want false, nil", ok, err)
	}
	if _, err := l.ChainExists("filter", "broken"); err == nil {
		t.Error("ChainExists(broken) succeeded")
	} else if want := "iptables: broken"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not carry iptables' message %q", err, want)
	}
	if _, err := l.List("filter", "broken"); err == nil {
		t.Error("List(broken) succeeded")
	}
}
