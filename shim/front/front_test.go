//go:build cgo

package front

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/engine/priority"
	"github.com/sforge-dev/netiso/shim"
)

func TestListsMatchGo(t *testing.T) {
	if got := engineNames(); !slices.Equal(got, engines.Names) {
		t.Errorf("front.c accepts engines %q, the shim %q: update front.c", got, engines.Names)
	}
	if got := priorityNames(); !slices.Equal(got, priority.Names) {
		t.Errorf("front.c accepts install priorities %q, the shim %q: update internal/cfront/cfront.h", got, priority.Names)
	}
	if got := runcLocations(); !slices.Equal(got, shim.RuncLocations) {
		t.Errorf("front.c looks for runc in %q, the shim in %q: update front.c", got, shim.RuncLocations)
	}
}

var commandCases = []struct {
	args []string
	want int // index of the subcommand the front execs for, -1 for none
}{
	{[]string{"start", "c1"}, 0},
	{[]string{"--root", "/run/docker/runtime-runc/moby", "--log", "/x/log.json", "--log-format", "json", "delete", "--force", "c1"}, 6},
	{[]string{"--root=/r", "--systemd-cgroup", "kill", "c1", "9"}, 2},
	{[]string{"-root", "/r", "-debug", "state", "c"}, 3},
	{[]string{"--log", "create", "start", "c"}, 2}, // --log's value is "create"
	{[]string{"--rootless", "auto", "--criu", "/c", "exec", "--process", "p.json", "c"}, 4},
	{[]string{"features"}, 0},
	{[]string{"ps", "c"}, 0},
	{[]string{"create", "--bundle", "b", "c"}, 0},
	{[]string{"--root", "/r", "run", "c"}, 2},
	{[]string{"restore", "--image-path", "/i", "c"}, -1},
	{[]string{"checkpoint", "c"}, -1},
	{[]string{"spec"}, -1},
	{[]string{"help"}, -1},
	{[]string{"--debug=true", "start", "c"}, -1},
	{[]string{"--root"}, -1},
	{[]string{"--unknown", "start", "c"}, -1},
	{[]string{"--", "start", "c"}, -1},
	{[]string{"-", "start"}, -1},
	{[]string{"---root", "start"}, -1},
	{[]string{"--version"}, -1},
	{[]string{"-v"}, -1},
	{[]string{}, -1},
	{[]string{""}, -1},
	{[]string{"Start", "c"}, -1},
}

func TestCommand(t *testing.T) {
	for _, c := range commandCases {
		if got := command(c.args); got != c.want {
			t.Errorf("command(%q) = %d, want %d", c.args, got, c.want)
		}
		checkCommandAgrees(t, c.args)
	}
}

// checkCommandAgrees: where the front finds a subcommand, the Go shim reads
// the same one at the same place; for create and run, where the front is
// sure of the bundle, the shim reads the same bundle.
func checkCommandAgrees(t *testing.T, args []string) {
	t.Helper()
	i := command(args)
	if i < 0 {
		return
	}
	a, err := shim.ParseArgs(args)
	creating := args[i] == "create" || args[i] == "run"
	if err != nil {
		if creating {
			if _, ok := bundle(args[i+1:]); !ok {
				return // the front leaves it to the shim
			}
		}
		t.Fatalf("the front takes %q, the shim rejects it: %v", args, err)
	}
	if a.CommandIndex != i || a.Command != args[i] || a.Modifies() != creating {
		t.Fatalf("the front reads %q at %d (%q); the shim reads %q at %d (modifies: %v)",
			args, i, args[i], a.Command, a.CommandIndex, a.Modifies())
	}
	if log, format := runcLog(args, i); log != a.LogFile || format != a.LogFormat {
		t.Fatalf("%q: the front reads runc's log %q (%q), the shim %q (%q)", args, log, format, a.LogFile, a.LogFormat)
	}
	if !creating {
		if a.Command == "restore" {
			t.Fatalf("the front execs runc restore for %q", args)
		}
		return
	}
	if dir, ok := bundle(args[i+1:]); ok && dir != a.Bundle {
		t.Fatalf("%q: the front reads bundle %q, the shim %q", args, dir, a.Bundle)
	}
}

var bundleCases = []struct {
	args []string
	dir  string
	ok   bool
}{
	{[]string{"--bundle", "/run/b", "--pid-file", "/run/b/init.pid", "c1"}, "/run/b", true},
	{[]string{"c1", "-b", "/x", "--bundle=/y"}, "/y", true},
	{[]string{"-b=/x", "--no-pivot", "--no-new-keyring", "--console-socket", "/s", "c1"}, "/x", true},
	{[]string{"--preserve-fds", "2", "c1"}, "", true},
	{[]string{"-d", "--keep", "--no-subreaper", "c1"}, "", true},
	{[]string{"c1"}, "", true},
	{[]string{"--bundle"}, "", false},
	{[]string{"--bundle", "", "c1"}, "", false},
	{[]string{"--bundle=", "c1"}, "", false},
	{[]string{"--preserve-fds", "-1", "c1"}, "", false},
	{[]string{"--preserve-fds", "+1", "c1"}, "", false},
	{[]string{"--preserve-fds", "1234567890", "c1"}, "", false},
	{[]string{"--pidfd-socket", "/s", "c1"}, "", false},
	{[]string{"--no-pivot=true", "c1"}, "", false},
	{[]string{"--", "c1"}, "", false},
	{[]string{"-", "c1"}, "", false},
	{[]string{"--unknown", "c1"}, "", false},
}

func TestBundle(t *testing.T) {
	for _, c := range bundleCases {
		dir, ok := bundle(c.args)
		if dir != c.dir || ok != c.ok {
			t.Errorf("bundle(%q) = %q, %v; want %q, %v", c.args, dir, ok, c.dir, c.ok)
		}
		checkCommandAgrees(t, append([]string{"create"}, c.args...))
	}
}

func TestMentionsMatchesShim(t *testing.T) {
	for _, s := range mentionCases {
		checkMentionsAgrees(t, []byte(s))
	}
	if mentions([]byte(`{"ociVersion":"1.0.2","process":{"env":["PATH=/bin"]}}`)) {
		t.Error("a plain spec mentions sforge")
	}
}

var mentionCases = []string{
	`{"annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:443"}}`,
	`{"process":{"env":["SFORGE_EGRESS=v1"]}}`,
	`{"annotations":{"sforge.io/egress":"x"}}`,
	`{"annotations":{"io.sforge":"x"}}`,
	`{}`,
	``,
}

// checkMentionsAgrees: the front execs runc unparsed only where the shim
// would too.
func checkMentionsAgrees(t *testing.T, b []byte) {
	t.Helper()
	if got, want := mentions(b), (shim.RawSpec{Data: b}).MentionsSforge(); got != want {
		t.Fatalf("%q: the front says mentions=%v, the shim %v", b, got, want)
	}
}

func FuzzMentions(f *testing.F) {
	for _, s := range mentionCases {
		f.Add([]byte(s))
	}
	f.Fuzz(checkMentionsAgrees)
}

func FuzzCommand(f *testing.F) {
	for _, c := range commandCases {
		f.Add(strings.Join(c.args, "\x00"))
	}
	for _, c := range bundleCases {
		f.Add(strings.Join(append([]string{"--root", "/r", "create"}, c.args...), "\x00"))
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkCommandAgrees(t, strings.Split(s, "\x00"))
	})
}

var configCases = []struct {
	in      string
	ok      bool
	runtime string
	engine  string
}{
	{`{}`, true, "", ""},
	{" \n{ }\n", true, "", ""},
	{`{"runtime": "/usr/sbin/runc", "hook": "/usr/local/bin/sforge-hook", "log": "/var/log/sforge/runtime.log", "engine": "auto"}`, true, "/usr/sbin/runc", "auto"},
	{`{"runtime":"/a","hookTimeout":15,"engine":"nftables"}`, true, "/a", "nftables"},
	{`{"hookTimeout": -3, "log": "-"}`, true, "", ""},
	{`{"hookTimeout": 0}`, true, "", ""},
	{`{"runtime":"/a","runtime":"/b"}`, true, "/b", ""},
	{`{"engine":"bogus"}`, true, "", "bogus"}, // read as written: the engine check comes after
	{`{"runtime":"/a","installPriority":"normal"}`, true, "/a", ""},
	{`{"installPriority":"bogus"}`, true, "", ""}, // read as written, like the engine
	{`{"installPriority":"realtime-but-longer"}`, false, "", ""},
	{`{"installPriority":1}`, false, "", ""},
	{``, false, "", ""},
	{`{`, false, "", ""},
	{`{"runtime":"/a",}`, false, "", ""},
	{`{"runtime":"/a"} {}`, false, "", ""},
	{`{"runtime":"/a\u0062"}`, false, "", ""},
	{`{"runtime":"/a\\b"}`, false, "", ""},
	{`{"runtime":"/é"}`, false, "", ""},
	{`{"Runtime":"/a"}`, false, "", ""},
	{`{"unknown":"x"}`, false, "", ""},
	{`{"runtime":null}`, false, "", ""},
	{`{"runtime":1}`, false, "", ""},
	{`{"hookTimeout":"10"}`, false, "", ""},
	{`{"hookTimeout":1.5}`, false, "", ""},
	{`{"hookTimeout":1e3}`, false, "", ""},
	{`{"hookTimeout":01}`, false, "", ""},
	{`{"hookTimeout":1234567890}`, false, "", ""},
	{`{"engine":"nftables-but-longer-than-16"}`, false, "", ""},
	{`[]`, false, "", ""},
}

func TestConfig(t *testing.T) {
	for _, c := range configCases {
		got, ok := config([]byte(c.in))
		if ok != c.ok || got.runtime != c.runtime || got.engine != c.engine {
			t.Errorf("config(%q) = %+v, %v; want %q, %q, %v", c.in, got, ok, c.runtime, c.engine, c.ok)
		}
		checkConfigAgrees(t, []byte(c.in))
	}
}

// TestConfigReadsInstallFormat: what Go writes for a Config (compact or
// indented), the front reads.
func TestConfigReadsInstallFormat(t *testing.T) {
	c := shim.Config{Runtime: "/usr/sbin/runc", Hook: "/usr/local/bin/sforge-hook", Log: "/var/log/sforge/runtime.log", HookTimeout: 10, Engine: "auto", InstallPriority: "normal"}
	compact, _ := json.Marshal(c)
	indented, _ := json.MarshalIndent(c, "", "  ")
	for _, b := range [][]byte{compact, append(indented, '\n')} {
		if got, ok := config(b); !ok || got != (settings{c.Runtime, c.Engine, c.Hook, c.HookTimeout, c.InstallPriority}) {
			t.Errorf("config(%s) = %+v, %v", b, got, ok)
		}
	}
}

// checkConfigAgrees: what the front reads, the shim reads the same way.
func checkConfigAgrees(t *testing.T, b []byte) {
	t.Helper()
	got, ok := config(b)
	if !ok {
		return
	}
	var c shim.Config
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("the front reads %q, the shim rejects it: %v", b, err)
	}
	if want := (settings{c.Runtime, c.Engine, c.Hook, c.HookTimeout, c.InstallPriority}); got != want {
		t.Fatalf("%q: the front reads %+v, the shim %+v", b, got, want)
	}
}

func FuzzConfig(f *testing.F) {
	for _, c := range configCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(checkConfigAgrees)
}

// TestResolveMatchesLoadConfig runs the front's whole settings decision
// and the shim's LoadConfig under the same files and environment: when the
// front decides, the shim decides the same.
func TestResolveMatchesLoadConfig(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "bin", "runc")
	if err := os.MkdirAll(filepath.Dir(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeConfig := func(s string) string {
		p := filepath.Join(t.TempDir(), "runtime.json")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name   string
		config string // "" for no file, "dir" for a directory
		env    map[string]string
		want   string // the runtime the front execs, "" when it leaves it to the shim
		normal bool   // the install window at normal priority
	}{
		{"config", `{"runtime":"` + fake + `"}`, nil, fake, false},
		{"env overrides config", `{"runtime":"/nonexistent"}`, map[string]string{"SFORGE_RUNC": "/bin/sh"}, "/bin/sh", false},
		{"no file, PATH", "", map[string]string{"PATH": filepath.Dir(fake) + ":/usr/bin"}, fake, false},
		{"no file, PATH root", "", map[string]string{"PATH": "/"}, usualRunc(), false},
		{"engine forced", `{"runtime":"` + fake + `"}`, map[string]string{"SFORGE_ENGINE": "iptables-legacy"}, fake, false},
		{"engine unknown in file", `{"runtime":"` + fake + `","engine":"bogus"}`, nil, "", false},
		{"engine unknown in env", `{"runtime":"` + fake + `"}`, map[string]string{"SFORGE_ENGINE": "pf"}, "", false},
		{"priority in file", `{"runtime":"` + fake + `","installPriority":"normal"}`, nil, fake, true},
		{"priority: env over file", `{"runtime":"` + fake + `","installPriority":"normal"}`, map[string]string{"SFORGE_INSTALL_PRIORITY": "realtime"}, fake, false},
		{"priority in env", `{"runtime":"` + fake + `"}`, map[string]string{"SFORGE_INSTALL_PRIORITY": "normal"}, fake, true},
		{"priority unknown in file", `{"runtime":"` + fake + `","installPriority":"high"}`, nil, "", false},
		{"priority unknown in env", `{"runtime":"` + fake + `"}`, map[string]string{"SFORGE_INSTALL_PRIORITY": "Normal"}, "", false},
		{"runtime is the shim", `{"runtime":"` + self + `"}`, nil, "", false},
		{"runtime missing", `{"runtime":"/nonexistent/runc"}`, nil, "", false},
		{"relative PATH entry", "", map[string]string{"PATH": "bin:/usr/bin"}, "", false},
		{"empty PATH entry", "", map[string]string{"PATH": "/nonexistent:"}, "", false},
		{"unclean PATH entry", "", map[string]string{"PATH": filepath.Dir(fake) + "/"}, "", false},
		{"unknown member", `{"runtime":"` + fake + `","extra":1}`, nil, "", false},
		{"config is a directory", "dir", nil, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "absent.json")
			switch c.config {
			case "":
			case "dir":
				cfg = t.TempDir()
			default:
				cfg = writeConfig(c.config)
			}
			t.Setenv(shim.ConfigEnv, cfg)
			for _, k := range []string{"SFORGE_RUNC", engines.EnvVar, priority.EnvVar} {
				t.Setenv(k, "")
			}
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			got, realtime, ok := resolve()
			if !ok {
				got = ""
			}
			if got != c.want || (ok && realtime == c.normal) {
				t.Fatalf("the front resolves %q (ok %v, real-time window %v), want %q (normal priority %v)", got, ok, realtime, c.want, c.normal)
			}
			if !ok {
				return
			}
			sc, err := shim.LoadConfig("", self, os.Getenv)
			if err != nil {
				t.Fatalf("the front execs %s, the shim fails: %v", got, err)
			}
			if sc.Runtime != got {
				t.Fatalf("the front execs %s, the shim %s", got, sc.Runtime)
			}
			if (sc.InstallPriority == priority.Realtime) != realtime {
				t.Fatalf("the front's window real-time %v, the shim's setting %s", realtime, sc.InstallPriority)
			}
		})
	}
}

// usualRunc is the first of the shim's usual runc locations present here
// ("" when none: the front then leaves it to the shim).
func usualRunc() string {
	for _, p := range shim.RuncLocations {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}
