package testcluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The node's container runtimes (Options.Containerd).
const (
	// ContainerdDebian is Debian's containerd 1.6, its runc shim and ctr,
	// found on PATH: the default.
	ContainerdDebian = ""
	// Containerd2 is containerd 2.x (Containerd2Version) with its own runc
	// shim and ctr, built from its Go module by
	// hack/k8s/build-containerd.sh into Containerd2BinDir. It changed what
	// matters to sforge-cni: the CRI plugin was split into
	// io.containerd.cri.v1.{runtime,images}, and it answers the kubelet's
	// RuntimeConfig call that 1.6 lacks. runc stays Debian's.
	Containerd2 = "v2"
)

// Containerd2Version is the containerd 2.x the Containerd2 variant runs;
// keep in step with hack/k8s/build-containerd.sh.
const Containerd2Version = "2.4.2"

// containerd2Bins are the binaries hack/k8s/build-containerd.sh builds.
var containerd2Bins = []string{"containerd", "containerd-shim-runc-v2", "ctr"}

// Containerd2BinDir is where hack/k8s/build-containerd.sh puts containerd
// 2.x: ${SFORGE_CONTAINERD2_CACHE:-/var/cache/sforge/containerd}/v<version>/bin.
func Containerd2BinDir() string {
	base := os.Getenv("SFORGE_CONTAINERD2_CACHE")
	if base == "" {
		base = "/var/cache/sforge/containerd"
	}
	return filepath.Join(base, "v"+Containerd2Version, "bin")
}

// runtimeBinaries returns the containerd daemon and the ctr of the
// selected runtime.
func runtimeBinaries(kind string) (containerd, ctr string, err error) {
	switch kind {
	case ContainerdDebian:
		if containerd, err = exec.LookPath("containerd"); err != nil {
			return "", "", err
		}
		ctr, err = exec.LookPath("ctr")
		return containerd, ctr, err
	case Containerd2:
		dir := Containerd2BinDir()
		for _, b := range containerd2Bins {
			if st, err := os.Stat(filepath.Join(dir, b)); err != nil || st.Mode()&0o111 == 0 {
				return "", "", fmt.Errorf("containerd %s: %s not built in %s: run `make k8s-bins` (hack/k8s/build-containerd.sh)", Containerd2Version, b, dir)
			}
		}
		return filepath.Join(dir, "containerd"), filepath.Join(dir, "ctr"), nil
	default:
		return "", "", fmt.Errorf("unknown Options.Containerd %q: want %q (Debian's 1.6) or %q", kind, ContainerdDebian, Containerd2)
	}
}

// runtimeConfig is the containerd configuration of the selected runtime.
func runtimeConfig(kind, dir string) string {
	if kind == Containerd2 {
		return containerd2Config(dir, Containerd2BinDir())
	}
	return containerdConfig(dir)
}

// containerd2Config is containerdConfig's twin for containerd 2.x (config
// version 3; 2.4 reads it and migrates it in memory). What differs from
// 1.6, besides the plugin names:
//   - the CRI settings moved to io.containerd.cri.v1.runtime (runtimes,
//     CNI with a list of bin_dirs, restrict_oom_score_adj and the netns
//     mounts: same reasons as 1.6's) and io.containerd.cri.v1.images
//     (snapshotter, the sandbox image is now a pinned image); the
//     streaming server stays in io.containerd.grpc.v1.cri.
//   - runtime_path names the 2.x runc shim: containerd resolves the shim
//     through PATH first, which would find Debian's 1.6 shim.
//   - the shim manager's socket_dir puts the shims' sockets under dir,
//     not in the host-wide /run/containerd/s (the path stays within the
//     108-byte socket limit: dir is /tmp/sforge-node-<8 hex>).
//   - NRI is disabled: it would serve /var/run/nri/nri.sock on the host.
//     No CDI spec directories: nothing from /etc/cdi or /var/run/cdi.
func containerd2Config(dir, binDir string) string {
	c := filepath.Join(dir, "containerd")
	cni := filepath.Join(dir, "cni")
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  address = %[5]q
[metrics]
  address = ""
[plugins.'io.containerd.internal.v1.opt']
  path = %[6]q
[plugins.'io.containerd.shim.v1.manager']
  socket_dir = %[7]q
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[8]q
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_unprivileged_icmp = true
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = %[9]q
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[10]q
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%[11]q]
    conf_dir = %[12]q
    max_conf_num = 1
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
`, filepath.Join(c, "root"), filepath.Join(c, "state"), filepath.Join(c, "containerd.sock"),
		filepath.Join(c, "containerd.sock.ttrpc"), filepath.Join(c, "debug.sock"), filepath.Join(c, "opt"),
		filepath.Join(dir, "s"), SandboxImage, filepath.Join(binDir, "containerd-shim-runc-v2"),
		filepath.Join(c, "runc"), filepath.Join(cni, "bin"), filepath.Join(cni, "net.d"))
}
