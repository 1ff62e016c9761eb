package oci

import (
	"fmt"
	"os"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// dockerDefaultCaps is Docker's default capability set without NET_RAW.
var dockerDefaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_SETGID", "CAP_SETUID",
	"CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

func allSets(caps ...string) *specs.LinuxCapabilities {
	return &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps, Inheritable: caps}
}

const allow = "v1;tcp:198.51.100.10:8080"

func isolated(p *specs.Process, ns ...specs.LinuxNamespace) *specs.Spec {
	if ns == nil {
		ns = []specs.LinuxNamespace{{Type: specs.NetworkNamespace}}
	}
	return &specs.Spec{Annotations: map[string]string{"sforge.io/egress": allow}, Process: p, Linux: &specs.Linux{Namespaces: ns}}
}

func TestDecide(t *testing.T) {
	with := func(extra ...string) []string { return append(append([]string{}, dockerDefaultCaps...), extra...) }
	self := fmt.Sprintf("/proc/%d/ns/net", os.Getpid())
	cases := []struct {
		name      string
		spec      *specs.Spec
		dropsRaw  bool
		want      string // "" = isolated; "-" = not asked for
		wantNetNS string
	}{
		{"docker default without NET_RAW", isolated(&specs.Process{Capabilities: allSets(dockerDefaultCaps...)}), false, "", ""},
		{"empty sets", isolated(&specs.Process{Capabilities: &specs.LinuxCapabilities{}}), false, "", ""},
		{"NET_RAW refused by a hook", isolated(&specs.Process{Capabilities: allSets(with("CAP_NET_RAW")...)}), false, "CAP_NET_RAW (bounding, effective, inheritable, permitted)", ""},
		{"NET_RAW left to the wrapper", isolated(&specs.Process{Capabilities: allSets(with("CAP_NET_RAW")...)}), true, "", ""},
		{"NET_ADMIN only bounding", isolated(&specs.Process{Capabilities: &specs.LinuxCapabilities{Bounding: with("CAP_NET_ADMIN")}}), true, "CAP_NET_ADMIN (bounding)", ""},
		{"SYS_ADMIN only ambient", isolated(&specs.Process{Capabilities: &specs.LinuxCapabilities{Ambient: []string{"CAP_SYS_ADMIN"}}}), true, "CAP_SYS_ADMIN (ambient)", ""},
		{"lowercase without prefix", isolated(&specs.Process{Capabilities: &specs.LinuxCapabilities{Effective: []string{" net_admin"}}}), true, "CAP_NET_ADMIN (effective)", ""},
		{"several", isolated(&specs.Process{Capabilities: &specs.LinuxCapabilities{Permitted: []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN"}}}), true, "CAP_NET_ADMIN (permitted) and CAP_SYS_ADMIN (permitted)", ""},
		{"capabilities omitted", isolated(&specs.Process{}), true, "lists no capabilities", ""},
		{"no process", isolated(nil), true, "has no process", ""},
		{"no network namespace", isolated(&specs.Process{Capabilities: allSets()}, specs.LinuxNamespace{Type: specs.PIDNamespace}), true, "would use the host's network", ""},
		{"the host's namespace by path", isolated(&specs.Process{Capabilities: allSets()}, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: self}), true, "names the host's network namespace", ""},
		{"a namespace by path", isolated(&specs.Process{Capabilities: allSets()}, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: "/run/netns/x"}), true, "", "/run/netns/x"},
		{"bad allowlist", &specs.Spec{Annotations: map[string]string{"sforge.io/egress": "v9"}}, true, "unsupported version", ""},
		{"allowlist twice in env", &specs.Spec{Process: &specs.Process{Env: []string{"SFORGE_EGRESS=v1", "SFORGE_EGRESS=" + allow}}}, true, "set it once", ""},
		{"not asked for", &specs.Spec{Process: &specs.Process{Capabilities: allSets("CAP_NET_ADMIN")}}, true, "-", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := Decide("c1", c.spec, Options{HostNetNS: []string{"/proc/1/ns/net", self}, DropsNetRaw: c.dropsRaw})
			switch c.want {
			case "":
				if err != nil || d == nil || d.NetNSPath != c.wantNetNS || len(d.Allow.Endpoints) != 1 {
					t.Fatalf("Decide = %+v, %v", d, err)
				}
			case "-":
				if err != nil || d != nil {
					t.Fatalf("Decide = %+v, %v; want nothing to enforce", d, err)
				}
			default:
				r, ok := err.(*Refusal)
				if !ok || !strings.Contains(r.Cause, c.want) || r.Fix == "" || d != nil {
					t.Fatalf("Decide = %+v, %v; want a refusal naming %q", d, err, c.want)
				}
				if !strings.HasPrefix(err.Error(), "container c1 refused: ") {
					t.Fatalf("message %q", err)
				}
			}
		})
	}
}

func TestDecideUserNS(t *testing.T) {
	s := isolated(&specs.Process{Capabilities: allSets()}, specs.LinuxNamespace{Type: specs.NetworkNamespace}, specs.LinuxNamespace{Type: specs.UserNamespace})
	if d, err := Decide("c1", s, Options{}); err != nil || !d.UserNS {
		t.Fatalf("Decide = %+v, %v; want UserNS", d, err)
	}
}

func TestSharesNetNS(t *testing.T) {
	self := fmt.Sprintf("/proc/%d/ns/net", os.Getpid())
	if shared, err := SharesNetNS(self, []string{"/proc/self/ns/net"}); err != nil || !shared {
		t.Fatalf("our own namespace: shared=%v err=%v, want shared", shared, err)
	}
	if _, err := SharesNetNS("/proc/0/ns/net", []string{"/proc/self/ns/net"}); err == nil {
		t.Fatal("a missing namespace was not an error")
	}
}
