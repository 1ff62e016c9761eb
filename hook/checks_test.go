package hook

import (
	"fmt"
	"os"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// dockerDefaultCaps is Docker's default capability set without NET_RAW,
// what an isolated container gets.
var dockerDefaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_SETGID", "CAP_SETUID",
	"CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

func allSets(caps []string) *specs.LinuxCapabilities {
	return &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps, Inheritable: caps}
}

func TestCheckCaps(t *testing.T) {
	with := func(extra ...string) []string { return append(append([]string{}, dockerDefaultCaps...), extra...) }
	cases := []struct {
		name string
		proc *specs.Process
		want string // "" = allowed
	}{
		{"docker default without NET_RAW", &specs.Process{Capabilities: allSets(dockerDefaultCaps)}, ""},
		{"no capabilities at all", &specs.Process{Capabilities: &specs.LinuxCapabilities{}}, ""},
		{"NET_RAW everywhere", &specs.Process{Capabilities: allSets(with("CAP_NET_RAW"))}, "CAP_NET_RAW (bounding, effective, inheritable, permitted)"},
		{"NET_ADMIN only bounding", &specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: with("CAP_NET_ADMIN")}}, "CAP_NET_ADMIN (bounding)"},
		{"SYS_ADMIN only ambient", &specs.Process{Capabilities: &specs.LinuxCapabilities{Ambient: []string{"CAP_SYS_ADMIN"}}}, "CAP_SYS_ADMIN (ambient)"},
		{"lowercase without prefix", &specs.Process{Capabilities: &specs.LinuxCapabilities{Effective: []string{"net_admin"}}}, "CAP_NET_ADMIN (effective)"},
		{"several", &specs.Process{Capabilities: &specs.LinuxCapabilities{Permitted: []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN"}}}, "CAP_NET_ADMIN (permitted) and CAP_SYS_ADMIN (permitted)"},
		{"capabilities omitted", &specs.Process{}, "lists no capabilities"},
		{"no process", nil, "has no process"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cause, fix := checkCaps(&specs.Spec{Process: c.proc})
			if c.want == "" {
				if cause != "" {
					t.Fatalf("refused: %s", cause)
				}
				return
			}
			if !strings.Contains(cause, c.want) || fix == "" {
				t.Fatalf("cause %q fix %q, want cause containing %q", cause, fix, c.want)
			}
		})
	}
}

func TestSharesNetNS(t *testing.T) {
	self := fmt.Sprintf("/proc/%d/ns/net", os.Getpid())
	if shared, err := sharesNetNS(self, hostNetNS); err != nil || !shared {
		t.Fatalf("our own namespace: shared=%v err=%v, want shared", shared, err)
	}
	if _, err := sharesNetNS("/proc/0/ns/net", hostNetNS); err == nil {
		t.Fatal("a missing namespace was not an error")
	}
}
