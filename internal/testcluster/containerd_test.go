package testcluster

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// TestContainerd2Config: the containerd 2.x configuration is valid TOML
// with the 2.x plugin names, keeps every path of the node under its
// directory (the shim binary excepted), and its shim socket directory
// leaves room for containerd's 64-character socket names within the
// 108-byte unix socket limit.
func TestContainerd2Config(t *testing.T) {
	dir := "/tmp/sforge-node-0123abcd"
	bin := "/var/cache/sforge/containerd/v" + Containerd2Version + "/bin"
	raw := containerd2Config(dir, bin)
	var cfg map[string]any
	if err := toml.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatalf("containerd 2 config is not TOML: %v\n%s", err, raw)
	}
	if v, _ := cfg["version"].(int64); v != 3 {
		t.Errorf("version = %v, want 3", cfg["version"])
	}
	plugins, _ := cfg["plugins"].(map[string]any)
	get := func(path ...string) any {
		var cur any = plugins
		for _, p := range path {
			m, _ := cur.(map[string]any)
			cur = m[p]
		}
		return cur
	}
	rt := "io.containerd.cri.v1.runtime"
	for _, c := range []struct {
		path []string
		want any
	}{
		{[]string{rt, "restrict_oom_score_adj"}, true},
		{[]string{rt, "netns_mounts_under_state_dir"}, true},
		{[]string{rt, "enable_unprivileged_icmp"}, true},
		{[]string{rt, "cni", "conf_dir"}, dir + "/cni/net.d"},
		{[]string{rt, "containerd", "runtimes", "runc", "runtime_path"}, bin + "/containerd-shim-runc-v2"},
		{[]string{rt, "containerd", "runtimes", "runc", "options", "Root"}, dir + "/containerd/runc"},
		{[]string{"io.containerd.cri.v1.images", "pinned_images", "sandbox"}, SandboxImage},
		{[]string{"io.containerd.cri.v1.images", "snapshotter"}, "overlayfs"},
		{[]string{"io.containerd.shim.v1.manager", "socket_dir"}, dir + "/s"},
	} {
		if got := get(c.path...); got != c.want {
			t.Errorf("plugins.%s = %v, want %v", strings.Join(c.path, "."), got, c.want)
		}
	}
	if bins, _ := get(rt, "cni", "bin_dirs").([]any); len(bins) != 1 || bins[0] != dir+"/cni/bin" {
		t.Errorf("cni bin_dirs = %v", get(rt, "cni", "bin_dirs"))
	}
	if d, _ := cfg["disabled_plugins"].([]any); len(d) != 1 || d[0] != "io.containerd.nri.v1.nri" {
		t.Errorf("disabled_plugins = %v, want NRI off (it would serve a host-wide socket)", cfg["disabled_plugins"])
	}
	for _, line := range strings.Split(raw, "\n") {
		if strings.Contains(line, `"/`) && !strings.Contains(line, `"`+dir+"/") && !strings.Contains(line, `"`+bin+"/") {
			t.Errorf("containerd 2 path outside %s: %s", dir, line)
		}
	}
	if n := len(filepath.Join(dir, "s", strings.Repeat("0", 64))); n >= 108 {
		t.Errorf("shim socket path %d bytes long, over the unix socket limit", n)
	}
}

func TestRuntimeBinaries(t *testing.T) {
	if _, _, err := runtimeBinaries("v3"); err == nil || !strings.Contains(err.Error(), "Options.Containerd") {
		t.Errorf("unknown runtime: err = %v, want one naming Options.Containerd", err)
	}
	t.Setenv("SFORGE_CONTAINERD2_CACHE", t.TempDir())
	_, _, err := runtimeBinaries(Containerd2)
	if err == nil || !strings.Contains(err.Error(), "make k8s-bins") {
		t.Errorf("containerd 2 not built: err = %v, want the fix (make k8s-bins)", err)
	}
	if got := runtimeConfig(ContainerdDebian, "/tmp/x"); !strings.HasPrefix(got, "version = 2\n") {
		t.Errorf("default runtime config is not Debian's 1.6 one:\n%s", got)
	}
}
