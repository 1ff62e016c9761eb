package testcluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// containerdConfig is Debian's containerd 1.6 (config version 2) with
// every path under dir. The settings this machine needs:
//   - restrict_oom_score_adj: the machine has no CAP_SYS_RESOURCE, so runc
//     cannot give the pause container the -998 the kubelet asks for and
//     the sandbox fails with "can't get final child's PID from pipe";
//     clamping to containerd's own score avoids the write.
//   - netns_mounts_under_state_dir: Pod netns bind mounts under dir, not
//     /var/run/netns.
//   - runc Root and the opt plugin's path under dir: nothing in /run/containerd/runc
//     or /opt/containerd.
//   - enable_unprivileged_icmp: opens net.ipv4.ping_group_range in Pods,
//     as Docker does, so that the probe's ICMP check is meaningful.
func containerdConfig(dir string) string {
	c := filepath.Join(dir, "containerd")
	cni := filepath.Join(dir, "cni")
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  address = %[5]q
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %[6]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[7]q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_unprivileged_icmp = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[10]q
`, filepath.Join(c, "root"), filepath.Join(c, "state"), filepath.Join(c, "containerd.sock"),
		filepath.Join(c, "containerd.sock.ttrpc"), filepath.Join(c, "debug.sock"), filepath.Join(c, "opt"),
		SandboxImage, filepath.Join(cni, "bin"), filepath.Join(cni, "net.d"), filepath.Join(c, "runc"))
}

// kubeletConfig is the KubeletConfiguration of the node. The fields that
// matter on this machine:
//   - failCgroupV1: false: the host is cgroup v1 (hybrid); the 1.37
//     default refuses to start there.
//   - cgroupRoot: the node's Pods live in a cgroup of their own, not the
//     host-wide /kubepods another kubelet may use, and teardown removes it.
//   - authentication anonymous + AlwaysAllow: lets the API server (which
//     has no client certificate for it) stream logs and exec; the port is
//     only reachable inside the node's namespace.
//   - clusterDNS: Pods get a resolver, so containerd fills the CNI "dns"
//     capability (served by the judge namespace).
//   - image GC and eviction thresholds that a busy shared disk never hits.
func kubeletConfig(dir, cgroupRoot string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%[1]s
cgroupDriver: cgroupfs
cgroupRoot: %[2]s
failCgroupV1: false
failSwapOn: false
address: %[3]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
podLogsDir: %[4]s
volumePluginDir: %[5]s
resolvConf: %[6]s
clusterDNS: [%[7]s]
clusterDomain: cluster.local
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
`, filepath.Join(dir, "containerd", "containerd.sock"), cgroupRoot, NodeIP,
		filepath.Join(dir, "pod-logs"), filepath.Join(dir, "kubelet", "volume-plugins"),
		filepath.Join(dir, "etc", "resolv.conf"), ClusterDNS)
}

// baseConflist is the node's network before sforge: Debian's bridge and
// host-local, dual stack, so that the tests can show IPv6 blocked rather
// than merely absent.
func baseConflist(dir, name string) map[string]any {
	return map[string]any{
		// Debian's bridge plugin (1.1.1) speaks CNI up to 1.0.0.
		"cniVersion": "1.0.0",
		"name":       name,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": filepath.Join(dir, "cni", "ipam"),
					"ranges": []any{
						[]any{map[string]any{"subnet": PodCIDR}},
						[]any{map[string]any{"subnet": PodCIDR6}},
					},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}},
				},
			},
		},
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// captureScript wraps sforge-cni: it appends what the runtime passed
// (CNI_COMMAND, CNI_ARGS and the stdin network config with its
// runtimeConfig) to capture as one tab-separated line, then runs the real
// plugin on the same input. Tests assert on it what the plugin received,
// instead of assuming it.
func captureScript(capture, real string) string {
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	return `#!/bin/sh
# Written by internal/testcluster: records sforge-cni's input, then runs it.
in=$(cat)
printf '%s\t%s\t%s\n' "$CNI_COMMAND" "$CNI_ARGS" "$in" >> ` + q(capture) + `
printf '%s' "$in" | exec ` + q(real) + `
`
}
