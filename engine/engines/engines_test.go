package engines

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/nftables"
	"github.com/sforge-dev/netiso/internal/testenv"
)

func TestOpen(t *testing.T) {
	supported := func() error { return nil }
	unsupported := func() error { return fmt.Errorf("%w: kernel 4.19", nftables.ErrUnsupported) }
	broken := func() error { return errors.New("failed to probe nf_tables: operation not permitted") }
	tests := []struct {
		name  string
		probe func() error
		want  string // engine Name(), or an error substring after "error: "
	}{
		{"", supported, "nftables"},
		{"auto", supported, "nftables"},
		{"auto", unsupported, "iptables"},
		{"auto", broken, "error: force one with SFORGE_ENGINE"},
		{"nftables", unsupported, "nftables"},
		{"iptables", supported, "iptables"},
		{"iptables-nft", supported, "iptables-nft"},
		{"iptables-legacy", supported, "iptables-legacy"},
		{" nftables ", supported, "nftables"},
		{"ebpf", supported, `error: unknown engine "ebpf" (allowed: auto, nftables, iptables, iptables-nft, iptables-legacy)`},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.want, func(t *testing.T) {
			e, err := Open(Options{Name: tt.name, probe: tt.probe})
			if want, ok := strings.CutPrefix(tt.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %v, want an error containing %q", err, want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if e.Name() != tt.want {
				t.Fatalf("engine %s, want %s", e.Name(), tt.want)
			}
		})
	}
}

func TestFromEnvNamesTheVariable(t *testing.T) {
	t.Setenv(EnvVar, "bogus")
	if _, err := FromEnv(); err == nil || !strings.HasPrefix(err.Error(), EnvVar+": unknown engine") {
		t.Fatalf("got %v", err)
	}
}

// TestOpenProbesInNetNS: with ProbeNetNS, Auto's probe runs in that
// namespace (where a rootless hook holds CAP_NET_ADMIN), and a namespace
// that is gone is an error, not a guess.
func TestOpenProbesInNetNS(t *testing.T) {
	testenv.RequireRoot(t)
	n := testenv.NewNetNS(t)
	var want, got unix.Stat_t
	if err := unix.Stat(n.Path(), &want); err != nil {
		t.Fatal(err)
	}
	probe := func() error { return unix.Stat("/proc/thread-self/ns/net", &got) }
	e, err := Open(Options{ProbeNetNS: n.Path(), probe: probe})
	if err != nil || e.Name() != nftables.Name {
		t.Fatalf("Open: %v, %v", e, err)
	}
	if got.Dev != want.Dev || got.Ino != want.Ino {
		t.Fatalf("the probe ran in namespace %d:%d, want %s (%d:%d)", got.Dev, got.Ino, n.Path(), want.Dev, want.Ino)
	}
	gone := filepath.Join(t.TempDir(), "gone")
	if _, err := Open(Options{ProbeNetNS: gone, probe: probe}); !errors.Is(err, engine.ErrNetNSGone) || !strings.Contains(err.Error(), "failed to choose a rule engine") {
		t.Fatalf("Open in a namespace that is gone: %v", err)
	}
}
