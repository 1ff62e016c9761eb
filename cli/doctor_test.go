package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/engine/nftables"
	"github.com/sforge-dev/netiso/installer"
)

type fakeSystem []installer.Finding

func (f fakeSystem) checks(context.Context) []installer.Finding { return f }

func TestDoctor(t *testing.T) {
	ok := func(c string) installer.Finding {
		return installer.Finding{Check: c, Severity: installer.OK, Message: c + " fine"}
	}
	bad := installer.Finding{Check: "x", Severity: installer.Error, Message: "x is broken", Fix: "repair x"}
	warn := installer.Finding{Check: "w", Severity: installer.Warning, Message: "w is not registered", Fix: "sforge install --w"}
	tests := []struct {
		name     string
		engines  []*fakeEngine
		system   fakeSystem
		wantErr  bool
		wantText []string
	}{
		{"healthy", []*fakeEngine{{name: "docker", present: true, findings: []installer.Finding{ok("docker")}}}, fakeSystem{ok("iptables"), ok("kernel")}, false,
			[]string{"[ok] docker: docker fine", "[ok] kernel", "no problems"}},
		{"broken registration", []*fakeEngine{{name: "docker", present: true, findings: []installer.Finding{ok("docker"), bad}}}, fakeSystem{ok("kernel")}, true,
			[]string{"[error] x: x is broken", "fix: repair x", "1 problem"}},
		{"nothing registered", []*fakeEngine{{name: "w", present: true, findings: []installer.Finding{warn}}}, fakeSystem{ok("kernel")}, true,
			[]string{"[warning] w: w is not registered", "fix: sforge install --w", "not registered with any container runtime", "fix: sforge install"}},
		{"absent runtime skipped", []*fakeEngine{{name: "docker", present: true, findings: []installer.Finding{ok("docker")}}, {name: "crio", findings: []installer.Finding{bad}}}, fakeSystem{}, false,
			[]string{"[info] crio: crio is not installed here"}},
		{"kernel broken", []*fakeEngine{{name: "docker", present: true, findings: []installer.Finding{ok("docker")}}},
			fakeSystem{{Check: "kernel", Severity: installer.Error, Message: "cannot create a network namespace", Fix: "run as root"}}, true,
			[]string{"[error] kernel: cannot create a network namespace", "fix: run as root"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &doctorOptions{reg: *fakeOptions(t, tt.engines...), system: tt.system,
				shimConfig: func() []installer.Finding { return []installer.Finding{ok("shim config")} },
				ruleEngine: func() []installer.Finding { return []installer.Finding{ok("rule engine")} }}
			var w bytes.Buffer
			err := o.run(context.Background(), &w)
			var ee *ExitError
			if tt.wantErr != (err != nil) || (err != nil && (!errors.As(err, &ee) || ee.Code != 1)) {
				t.Fatalf("err = %v\n%s", err, w.String())
			}
			text := w.String()
			if err != nil {
				text += err.Error()
			}
			for _, want := range tt.wantText {
				if !strings.Contains(text, want) {
					t.Fatalf("output lacks %q:\n%s", want, w.String())
				}
			}
		})
	}
}

func TestEngineFindings(t *testing.T) {
	supported := func() error { return nil }
	unsupported := func() error { return fmt.Errorf("%w: kernel 5.4 is older than 5.6", nftables.ErrUnsupported) }
	denied := func() error { return errors.New("failed to probe nf_tables: operation not permitted") }
	tests := []struct {
		name, engine, source string
		probe                func() error
		severity             installer.Severity
		want                 string
	}{
		{"auto picks nftables", "auto", "default", supported, installer.OK, "nftables (auto, default): the kernel supports nf_tables"},
		{"auto falls back", "auto", "default", unsupported, installer.OK, "iptables (auto, default): nftables is not supported by this kernel: kernel 5.4"},
		{"auto cannot tell", "auto", "default", denied, installer.Error, "cannot tell which engine auto would use"},
		{"nftables forced", "nftables", "$SFORGE_ENGINE", supported, installer.OK, "nftables (forced by $SFORGE_ENGINE)"},
		{"nftables forced, unsupported", "nftables", "/etc/sforge/runtime.json", unsupported, installer.Error, "nftables (forced by /etc/sforge/runtime.json) but"},
		{"iptables forced", "iptables-legacy", "/etc/sforge/runtime.json", denied, installer.OK, "iptables-legacy (forced by /etc/sforge/runtime.json)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := engineFindings(tt.engine, tt.source, tt.probe)
			if len(fs) != 1 || fs[0].Severity != tt.severity || !strings.Contains(fs[0].Message, tt.want) || fs[0].Check != "rule engine" {
				t.Fatalf("findings %+v, want %s %q", fs, tt.severity, tt.want)
			}
			if tt.severity == installer.Error && fs[0].Fix == "" {
				t.Fatal("an error without a fix")
			}
		})
	}
}
