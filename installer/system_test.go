package installer

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
)

type fakeSys struct {
	have    map[string]bool
	version string
	fail    map[string]error // binary -> error in a new netns
	noNetNS bool
	noIPv6  bool
}

func (f fakeSys) system() System {
	return System{
		LookPath: func(n string) (string, error) {
			if f.have[n] {
				return "/usr/sbin/" + n, nil
			}
			return "", errors.New("not found")
		},
		Run: func(_ context.Context, stdin []byte, netns bool, name string, args ...string) ([]byte, error) {
			if name == "iptables" && len(args) == 1 && args[0] == "--version" {
				return []byte(f.version), nil
			}
			if !netns {
				return nil, errors.New("unexpected command outside a throwaway netns: " + name)
			}
			if f.noNetNS {
				return []byte("unshare: Operation not permitted"), errors.New("exit status 1")
			}
			if err := f.fail[name]; err != nil {
				return []byte("iptables-restore: line 2 failed\nmore"), err
			}
			return nil, nil
		},
		Exists: func(string) bool { return !f.noIPv6 },
	}
}

func all(bs ...Backend) map[string]bool {
	m := map[string]bool{"iptables": true}
	for _, b := range bs {
		for _, n := range backendBinaries(b) {
			m[n] = true
		}
	}
	return m
}

func severities(fs []Finding) []Severity {
	var s []Severity
	for _, f := range fs {
		s = append(s, f.Severity)
	}
	return s
}

func eq(a, b []Severity) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCheckIPTables(t *testing.T) {
	tests := []struct {
		name string
		sys  fakeSys
		want []Severity
		msg  string
	}{
		{"both backends", fakeSys{have: all("nft", "legacy"), version: "iptables v1.8.9 (nf_tables)"}, []Severity{OK, OK}, "(in use by iptables)"},
		{"legacy only, active", fakeSys{have: all("legacy"), version: "iptables v1.8.9 (legacy)"}, []Severity{Info, OK}, "backend nft lacks"},
		{"active incomplete", fakeSys{have: map[string]bool{"iptables": true, "iptables-nft": true}, version: "iptables v1.8.9 (nf_tables)"}, []Severity{Error, Info}, "ip6tables-nft-restore"},
		{"no iptables", fakeSys{have: map[string]bool{}}, []Severity{Error}, "not usable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := tt.sys.system().CheckIPTables(context.Background())
			if !eq(severities(fs), tt.want) {
				t.Fatalf("findings %+v", fs)
			}
			var msgs []string
			for _, f := range fs {
				msgs = append(msgs, f.Message)
				if f.Severity >= Warning && f.Fix == "" {
					t.Errorf("no fix: %+v", f)
				}
			}
			if !strings.Contains(strings.Join(msgs, "|"), tt.msg) {
				t.Fatalf("messages %q lack %q", msgs, tt.msg)
			}
		})
	}
}

func TestCheckKernel(t *testing.T) {
	nft := "iptables v1.8.9 (nf_tables)"
	tests := []struct {
		name string
		sys  fakeSys
		want []Severity
	}{
		{"works", fakeSys{have: all("nft"), version: nft}, []Severity{OK, OK}},
		{"no netns", fakeSys{have: all("nft"), version: nft, noNetNS: true}, []Severity{Error}},
		{"ipv4 fails", fakeSys{have: all("nft"), version: nft, fail: map[string]error{"iptables-nft-restore": errors.New("exit status 1")}}, []Severity{Error, OK}},
		{"ipv6 fails", fakeSys{have: all("nft"), version: nft, fail: map[string]error{"ip6tables-nft-restore": errors.New("exit status 1")}}, []Severity{OK, Warning}},
		{"no ipv6 in kernel", fakeSys{have: all("nft"), version: nft, noIPv6: true, fail: map[string]error{"ip6tables-nft-restore": errors.New("exit status 1")}}, []Severity{OK, Info}},
		{"legacy", fakeSys{have: all("legacy"), version: "iptables v1.8.9 (legacy)"}, []Severity{OK, OK}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := tt.sys.system().CheckKernel(context.Background())
			if !eq(severities(fs), tt.want) {
				t.Fatalf("findings %+v", fs)
			}
		})
	}
}

// The real check on this machine: as root it creates namespaces and loads
// rules; it must never touch the host's rules.
func TestCheckKernelReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root; covered by the integration suite")
	}
	if _, err := (System{}).lookPath("iptables"); err != nil {
		t.Skip("no iptables")
	}
	for _, f := range (System{}).CheckKernel(context.Background()) {
		if f.Severity == Error {
			t.Fatalf("kernel check failed on this machine: %+v", f)
		}
	}
}
