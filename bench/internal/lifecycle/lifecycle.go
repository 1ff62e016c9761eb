// Package lifecycle drives containers through the runtime the way
// containerd's runc shim does: `create --bundle B --pid-file P <id>`,
// `start <id>`, wait for the container's process to exit, `delete <id>`,
// each a separate runtime process with runc's global flags (--root, --log,
// --log-format json). The runtime binary is runc or sforge-runtime; the
// bundles are made from config.json files captured from real engines
// (bench/testdata), so that a container costs what it costs there.
package lifecycle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/internal/testenv"
)

// Options describe a bundle.
type Options struct {
	// Template is a config.json captured from an engine (see
	// bench/testdata/README.md); "" is a minimal spec (no seccomp, few
	// mounts), the shape of the hook issue's benchmarks.
	Template string
	// NetNS is the path of the network namespace to join; "" gives the
	// container a private one.
	NetNS string
	// Args is the process (default: busybox true).
	Args []string
	// Env is added to process.env (the SFORGE_EGRESS form).
	Env []string
	// Annotations are added to the spec.
	Annotations map[string]string
	// DropCaps are removed from every capability set.
	DropCaps []string
	// Hooks are set as the spec's hooks, by stage.
	Hooks map[string][]Hook
	// Busybox is the busybox-static binary copied into the rootfs.
	Busybox string
	// UserNS gives the container a user namespace of its own whose root
	// is host uid and gid RemappedRoot, as Docker's --userns-remap does
	// (the rootfs is handed to that root, as Docker's remapped layers are).
	UserNS bool
}

// RemappedRoot is the host uid and gid of a UserNS container's root: the
// first of the subordinate range dockerd's "default" remap user gets.
const RemappedRoot = 100000

// Hook is an OCI hook entry.
type Hook struct {
	Path    string   `json:"path"`
	Args    []string `json:"args,omitempty"`
	Env     []string `json:"env,omitempty"`
	Timeout *int     `json:"timeout,omitempty"`
}

// Bundle is a bundle directory whose config.json is rewritten before each
// container (Reset), as an engine writes a fresh one for each: the shim
// then patches it every time, as it would in production.
type Bundle struct {
	Dir    string
	config []byte
}

// NewBundle lays out a bundle in dir: a rootfs with busybox, the files
// the template bind-mounts, and the config.json.
func NewBundle(dir string, o Options) (*Bundle, error) {
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp", "run"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := copyFile(o.Busybox, filepath.Join(rootfs, "bin", "busybox")); err != nil {
		return nil, err
	}
	spec := map[string]any{}
	if o.Template == "" {
		spec = minimalSpec()
	} else {
		b, err := os.ReadFile(o.Template)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &spec); err != nil {
			return nil, fmt.Errorf("%s: %w", o.Template, err)
		}
	}
	if err := adapt(spec, dir, o); err != nil {
		return nil, err
	}
	if o.UserNS {
		if err := chownTree(rootfs, RemappedRoot); err != nil {
			return nil, err
		}
		// The remapped root must reach its rootfs, as Docker's remapped
		// data root (0701) lets it reach the layers.
		if err := testenv.SearchableAbove(rootfs); err != nil {
			return nil, err
		}
	}
	b := &Bundle{Dir: dir}
	var err error
	if b.config, err = json.MarshalIndent(spec, "", " "); err != nil {
		return nil, err
	}
	return b, b.Reset()
}

// Reset rewrites config.json as generated.
func (b *Bundle) Reset() error {
	return os.WriteFile(filepath.Join(b.Dir, "config.json"), b.config, 0o644)
}

// adapt points a captured spec at this bundle: root, bind-mount sources
// (BUNDLE/<name> in the templates), the network namespace, the process,
// the capabilities, and what the contender adds.
func adapt(spec map[string]any, dir string, o Options) error {
	spec["root"] = map[string]any{"path": "rootfs"}
	mounts, _ := spec["mounts"].([]any)
	for _, m := range mounts {
		m, _ := m.(map[string]any)
		src, _ := m["source"].(string)
		name, ok := strings.CutPrefix(src, "BUNDLE/")
		if !ok {
			continue
		}
		p := filepath.Join(dir, name)
		m["source"] = p
		var err error
		if name == "shm" {
			err = os.MkdirAll(p, 0o755)
		} else {
			err = os.WriteFile(p, []byte("# sforge bench\n"), 0o644)
		}
		if err != nil {
			return err
		}
	}
	linux, _ := spec["linux"].(map[string]any)
	if linux == nil {
		return errors.New("spec without linux")
	}
	var nss []any
	for _, n := range linux["namespaces"].([]any) {
		if n.(map[string]any)["type"] != "network" {
			nss = append(nss, n)
		}
	}
	net := map[string]any{"type": "network"}
	if o.NetNS != "" {
		net["path"] = o.NetNS
	}
	if o.UserNS {
		nss = append(nss, map[string]any{"type": "user"})
		m := []any{map[string]any{"containerID": 0, "hostID": RemappedRoot, "size": 65536}}
		linux["uidMappings"], linux["gidMappings"] = m, m
		// The captured range names gids the remap does not map, which
		// the kernel refuses in the container's namespace.
		if sysctl, ok := linux["sysctl"].(map[string]any); ok && sysctl["net.ipv4.ping_group_range"] != nil {
			sysctl["net.ipv4.ping_group_range"] = "0 65535"
		}
	}
	linux["namespaces"] = append(nss, net)
	delete(linux, "cgroupsPath") // runc derives one from the id
	process, _ := spec["process"].(map[string]any)
	args := o.Args
	if args == nil {
		args = []string{"/bin/busybox", "true"}
	}
	process["args"] = args
	process["terminal"] = false
	env, _ := process["env"].([]any)
	for _, e := range o.Env {
		env = append(env, e)
	}
	process["env"] = env
	if caps, ok := process["capabilities"].(map[string]any); ok {
		for set, list := range caps {
			var kept []any
			for _, c := range list.([]any) {
				drop := false
				for _, d := range o.DropCaps {
					drop = drop || c == d
				}
				if !drop {
					kept = append(kept, c)
				}
			}
			caps[set] = kept
		}
	}
	ann, _ := spec["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
	}
	for k, v := range o.Annotations {
		ann[k] = v
	}
	if len(ann) > 0 {
		spec["annotations"] = ann
	}
	delete(spec, "hooks") // engines' own hooks (Docker's libnetwork-setkey) need the engine
	if len(o.Hooks) > 0 {
		spec["hooks"] = o.Hooks
	}
	return nil
}

// chownTree gives everything under dir to uid and gid id.
func chownTree(dir string, id int) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, id, id)
	})
}

// minimalSpec is the bundle of the hook issue's benchmarks: the default
// mounts, no seccomp, no device rules.
func minimalSpec() map[string]any {
	caps := []any{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID",
		"CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
	return map[string]any{
		"ociVersion": "1.0.2",
		"hostname":   "sforgebench",
		"process": map[string]any{
			"cwd":          "/",
			"env":          []any{"PATH=/bin"},
			"capabilities": map[string]any{"bounding": caps, "effective": caps, "permitted": caps},
		},
		"mounts": []any{
			map[string]any{"destination": "/proc", "type": "proc", "source": "proc"},
			map[string]any{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []any{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		},
		"linux": map[string]any{
			"namespaces": []any{
				map[string]any{"type": "pid"}, map[string]any{"type": "ipc"}, map[string]any{"type": "uts"}, map[string]any{"type": "mount"},
			},
		},
	}
}

// SetSubreaper makes the calling process adopt orphaned descendants, as
// containerd's runc shim does: a container's process, whose parent (runc
// create) exits, becomes the caller's child, so it can be waited for.
func SetSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// Runtime runs lifecycles with one runtime binary and state directory.
type Runtime struct {
	Binary string
	Root   string
	// Env is the runtime's environment (nil: the caller's).
	Env []string
	// AfterCreate, when set, runs between create and start with the
	// container's pid (the seed baseline installs its rules there).
	AfterCreate func(pid int) error
	// OwnSession runs each create in a session of its own (setsid). With
	// the cpu controller off, as on the CI machine (cgroup v1, every task
	// in the root cpu group), the kernel schedules each session as a group
	// (autogroup): by default the creates of a burst, their runc children
	// and fronts share the test's group, which competes as one entity with
	// each container's cgroup. A diagnostic (SFORGE_BENCH_OWN_SESSION), not
	// how Docker or containerd start runtimes.
	OwnSession bool
}

// Times are the phases of one lifecycle.
type Times struct {
	Create, Start, Wait, Delete, Total time.Duration
}

// Lifecycle runs one container through create, start, exit and delete.
func (r *Runtime) Lifecycle(b *Bundle, id string) (Times, error) {
	var t Times
	pidFile := filepath.Join(b.Dir, id+".pid")
	defer os.Remove(pidFile)
	begin := time.Now()
	if err := r.run("create", "--bundle", b.Dir, "--pid-file", pidFile, id); err != nil {
		return t, err
	}
	t.Create = time.Since(begin)
	pid, err := readPID(pidFile)
	if err != nil {
		_ = r.run("delete", "--force", id)
		return t, err
	}
	if r.AfterCreate != nil {
		if err := r.AfterCreate(pid); err != nil {
			_ = r.run("delete", "--force", id)
			return t, err
		}
	}
	mark := time.Now()
	if err := r.run("start", id); err != nil {
		_ = r.run("delete", "--force", id)
		return t, err
	}
	t.Start = time.Since(mark)
	mark = time.Now()
	if err := waitExit(pid); err != nil {
		_ = r.run("delete", "--force", id)
		return t, err
	}
	t.Wait = time.Since(mark)
	mark = time.Now()
	if err := r.run("delete", id); err != nil {
		return t, err
	}
	t.Delete = time.Since(mark)
	t.Total = time.Since(begin)
	return t, nil
}

// Create runs only the create (the concurrency benchmark times it).
func (r *Runtime) Create(b *Bundle, id, pidFile string) error {
	return r.run("create", "--bundle", b.Dir, "--pid-file", pidFile, id)
}

// Start, Delete and ForceDelete run those subcommands.
func (r *Runtime) Start(id string) error       { return r.run("start", id) }
func (r *Runtime) Delete(id string) error      { return r.run("delete", id) }
func (r *Runtime) ForceDelete(id string) error { return r.run("delete", "--force", id) }

func (r *Runtime) run(args ...string) error {
	if err := os.MkdirAll(r.Root, 0o700); err != nil {
		return err
	}
	argv := append([]string{"--root", r.Root, "--log", filepath.Join(r.Root, "log.json"), "--log-format", "json"}, args...)
	cmd := exec.Command(r.Binary, argv...)
	cmd.Env = r.Env
	// Files, not pipes: a container inherits create's stdio, and waiting
	// for a pipe would wait for the container.
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer null.Close()
	cmd.Stdin, cmd.Stdout = null, null
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if args[0] == "create" {
		// The container keeps create's stderr: a file, read on failure.
		f, err := os.CreateTemp(r.Root, "create-stderr-")
		if err != nil {
			return err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		cmd.Stderr = f
		if r.OwnSession {
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		}
	}
	if err := cmd.Run(); err != nil {
		if f, ok := cmd.Stderr.(*os.File); ok {
			b, _ := os.ReadFile(f.Name())
			stderr.Write(b)
		}
		return fmt.Errorf("%s %s: %v: %s%s", filepath.Base(r.Binary), strings.Join(args, " "), err, stderr.String(), r.lastLog())
	}
	return nil
}

// lastLog is the end of runc's JSON log, for error messages.
func (r *Runtime) lastLog() string {
	b, _ := os.ReadFile(filepath.Join(r.Root, "log.json"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, "\n")
}

// ReadPID reads a pid file.
func ReadPID(path string) (int, error) { return readPID(path) }

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// WaitExit waits for the container's process to exit.
func WaitExit(pid int) error { return waitExit(pid) }

// waitExit reaps pid when it is the caller's child (SetSubreaper), else
// waits on a pidfd.
func waitExit(pid int) error {
	var ws unix.WaitStatus
	_, err := unix.Wait4(pid, &ws, 0, nil)
	for errors.Is(err, syscall.EINTR) {
		_, err = unix.Wait4(pid, &ws, 0, nil)
	}
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, syscall.ECHILD):
		return fmt.Errorf("wait for %d: %w", pid, err)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil // already gone
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, int((2 * time.Minute).Milliseconds()))
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			return fmt.Errorf("process %d did not exit within 2 minutes", pid)
		}
		return nil
	}
}

func copyFile(src, dst string) error {
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o755)
}
