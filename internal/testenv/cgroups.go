package testenv

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// cgroupRoot is where the kernel's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// RemoveNewCgroups removes, when the test ends, the cgroups called name
// (under each cgroup v1 hierarchy, or under the unified one) that do not
// exist yet: the parent an engine makes for its containers and leaves
// behind when it stops (dockerd's "docker", podman's "libpod_parent",
// containerd's namespace). Call it before starting the engine, so that it
// runs after the engine stopped. Only empty cgroups go, deepest first (the
// kernel refuses to remove one that holds a process); one that stays is
// logged.
func RemoveNewCgroups(tb testing.TB, name string) {
	tb.Helper()
	var fresh []string
	for _, h := range cgroupHierarchies() {
		p := filepath.Join(h, name)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			fresh = append(fresh, p)
		}
	}
	tb.Cleanup(func() {
		for _, p := range fresh {
			var dirs []string
			_ = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, path)
				}
				return nil
			})
			for i := len(dirs) - 1; i >= 0; i-- {
				_ = syscall.Rmdir(dirs[i])
			}
			if _, err := os.Lstat(p); err == nil {
				tb.Logf("cgroup %s is left: it is not empty", p)
			}
		}
	})
}

// cgroupHierarchies lists the mounted cgroup hierarchies: the unified one
// alone where it is mounted at the root (cgroup v2), else each v1
// hierarchy's directory (not the compatibility links such as cpuacct ->
// cpu,cpuacct).
func cgroupHierarchies() []string {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		return []string{cgroupRoot}
	}
	entries, err := os.ReadDir(cgroupRoot)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
			out = append(out, filepath.Join(cgroupRoot, e.Name()))
		}
	}
	return out
}
