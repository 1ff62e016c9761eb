package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/engine/iptables"
	"github.com/sforge-dev/netiso/engine/nftables"
)

// The isolated create of a container whose network namespace the shim does
// not make (one given by path, or inside a user namespace), without a hook
// process.
//
// runc create returns once the container exists and its init process
// waits, inside all the container's namespaces, for `runc start`: the
// user's program has not run and cannot before start. The rules go in
// at that point, from the shim's own process, and the shim exits 0 only
// when they are installed and verified. containerd, Docker and conmon call
// start only after create succeeded, so the program never runs without its
// rules. When anything fails the shim deletes the container (`runc delete
// --force`) and exits non-zero with one line naming the cause.
//
// If the shim is killed between runc create and the end of installation,
// the container is left created and never started: the caller sees the
// create fail and deletes it (containerd's runc shim runs `runc delete
// --force` through this same binary when a create fails).

// create runs the isolated create: runc create as a child, then the rules.
func (s *Shim) create(a Args, args []string, p *plan) error {
	pidFile, runArgs := a.PIDFile, args
	if pidFile == "" {
		// The pid file is how runc tells its caller the init pid; ask
		// for one in a directory of ours when the caller did not.
		dir, err := os.MkdirTemp("", "sforge-runtime-")
		if err != nil {
			return fmt.Errorf("container %s: failed to create a directory for the pid file: %w", a.ID, err)
		}
		defer os.RemoveAll(dir)
		pidFile = filepath.Join(dir, "init.pid")
		runArgs = make([]string, 0, len(args)+2)
		runArgs = append(runArgs, args[:a.CommandIndex+1]...)
		runArgs = append(runArgs, "--pid-file", pidFile)
		runArgs = append(runArgs, args[a.CommandIndex+1:]...)
	}
	// While runc creates the container, the install's own work that needs
	// no namespace is done once (nftables.Warm); with one P (see prepare),
	// the install took 1.16 ms instead of 1.56 here.
	warmed := make(chan struct{})
	go func() {
		defer close(warmed)
		if _, ok := p.engine.(*nftables.Engine); ok {
			_ = nftables.Warm(a.ID, p.allow)
		}
	}()
	begin := time.Now()
	code, err := s.Runtime.Run(runArgs)
	<-warmed
	if err != nil {
		return fmt.Errorf("container %s: %w", a.ID, err)
	}
	if code != 0 {
		// runc said why; it created nothing that outlives its failure.
		return ExitStatus(code)
	}
	return s.finish(a, args, pidFile, p, time.Since(begin), s.frontNote())
}

// finish installs the rules in the container runc has just created, and
// deletes the container when that fails.
func (s *Shim) finish(a Args, args []string, pidFile string, p *plan, runcTime time.Duration, note string) error {
	start := time.Now()
	cpu0, sw0 := cpuTime(), switches()
	rep, err := s.install(a, args, pidFile, p)
	installCPU, sw1 := cpuTime()-cpu0, switches()
	if err != nil {
		return s.deleteAfter(a, args, err)
	}
	if s.Log != nil {
		s.Log.Infof("container %s: isolated before start (engine=%s table=%s rules=%d endpoints=%d resolvers=%d ipv6=%s install=%s install-cpu=%s total=%s switches=%s spec=%s runc=%s%s), %s dropped",
			a.ID, rep.Engine, rep.Chain, rep.Rules, len(p.allow.Endpoints), len(p.allow.DNS), rep.IPv6,
			rep.Duration.Round(time.Microsecond), installCPU.Round(time.Microsecond), time.Since(start).Round(time.Microsecond), sw1.since(sw0),
			p.prepared.Round(time.Microsecond), runcTime.Round(time.Microsecond), note, dropCapability)
	}
	return nil
}

// adopt finishes an isolated create that sforge-runtime's C front began
// (shim/front/create.c): runc has created the container, and the front was
// not sure it could install (its engine did not, or the process or its
// namespace were not as it expected). The shim decides again from the
// spec as for any create, except that runc must not run again: a plan to
// install after create is carried out (with the Go engine); anything else
// deletes the container and fails, since it was created without a plan
// the shim would have made.
func (s *Shim) adopt(a Args, args []string) error {
	fail := func(err error) error { return s.deleteAfter(a, args, err) }
	if a.Command != "create" || a.PIDFile == "" {
		return fail(&RefusedError{ID: a.ID, Cause: "the runtime's front created a container from a command line it does not handle",
			Fix: "the container was deleted without starting; report this with the runc command line"})
	}
	begin := time.Now()
	// The front creates only what the shim would install after create;
	// a namespace made now could not be the container's.
	s.NoMadeNetNS = true
	p, err := s.prepare(a)
	switch {
	case err != nil:
		return fail(err)
	case p == nil || p.mode != modeAfterCreate:
		return fail(&RefusedError{ID: a.ID, Cause: "the runtime's front created a container that the shim would not isolate after creation",
			Fix: "the container was deleted without starting; start it again with SFORGE_RUNTIME_NO_FRONT=1 in the runtime's environment, and report this"})
	}
	p.prepared = time.Since(begin)
	return s.finish(a, args, a.PIDFile, p, 0, " front=c+go")
}

func (s *Shim) engine() (engine.Engine, error) {
	if s.Engine == nil {
		e, err := engines.New(s.EngineName)
		if err != nil {
			return nil, err
		}
		s.Engine = e
	}
	return s.Engine, nil
}

// install finds the created container's init process and installs the
// rules in its network namespace.
func (s *Shim) install(a Args, args []string, pidFile string, p *plan) (engine.Report, error) {
	refuse := func(cause, fix string) error { return &RefusedError{ID: a.ID, Cause: cause, Fix: fix} }
	const deleted = "the container was deleted without starting"
	pid, err := readPIDFile(pidFile)
	if err != nil {
		// A caller's odd --pid-file (empty, say) left none: ask runc.
		if pid, err = s.statePID(a, args); err != nil {
			return engine.Report{}, refuse("failed to find the container's process: "+err.Error(), deleted+"; report this with the runc command line")
		}
	}
	ns, err := openNetNSOf(pid)
	if err != nil {
		return engine.Report{}, refuse(err.Error(), deleted+"; start it again")
	}
	defer ns.Close()
	for _, h := range s.hostNetNS() {
		if sameNS(ns, h) {
			return engine.Report{}, refuse("its network namespace is the host's", deleted+"; give it its own network (no --network host)")
		}
	}
	if p.netnsPath != "" && !sameNS(ns, p.netnsPath) {
		return engine.Report{}, refuse(fmt.Sprintf("its process is not in the network namespace its spec names (%s)", p.netnsPath), deleted+"; start it again")
	}
	// The engine opens the namespace by path: this one is held open by
	// the shim, so it is the container's whatever happens to the pid.
	t := engine.Target{NetNS: fmt.Sprintf("/proc/self/fd/%d", ns.Fd()), ID: a.ID}
	rep, err := p.engine.Install(t, p.allow)
	if err != nil {
		return engine.Report{}, refuse("failed to install the egress rules: "+err.Error(), deleted+"; "+installFix(err))
	}
	return rep, nil
}

func installFix(err error) string {
	var nf *iptables.NotFoundError
	switch {
	case errors.As(err, &nf):
		return "install iptables or use the nftables engine (\"engine\": \"nftables\" in " + DefaultConfigPath + ")"
	case errors.Is(err, engine.ErrNetNSGone):
		return "its process exited before the rules were in place; start it again"
	}
	return "check the host with `sforge doctor`"
}

// readPIDFile reads the pid runc wrote.
func readPIDFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("failed to read the pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("the pid file %s holds %q, not a pid", path, b)
	}
	return pid, nil
}

// statePID asks `runc state` for the init pid: one more process, only
// when the pid file did not tell.
func (s *Shim) statePID(a Args, args []string) (int, error) {
	path := s.runtimePath()
	if path == "" {
		return 0, errors.New("no pid file, and the runtime cannot be asked")
	}
	cmd := exec.Command(path, append(append([]string{}, args[:a.CommandIndex]...), "state", a.ID)...)
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("runc state: %w", err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		return 0, fmt.Errorf("runc state printed no pid: %q", out)
	}
	return st.Pid, nil
}

func (s *Shim) runtimePath() string {
	if r, ok := s.Runtime.(execRuntime); ok {
		return r.path
	}
	return ""
}

// deleteAfter deletes a created container that could not be isolated and
// returns err, with the deletion's own failure if any.
func (s *Shim) deleteAfter(a Args, args []string, err error) error {
	if derr := s.deleteContainer(a, args); derr != nil {
		err = errors.Join(err, derr)
	}
	return err
}

// deleteContainer force-deletes a created container that could not be
// isolated, with the caller's global flags (--root, --systemd-cgroup, the
// log), so that nothing of it remains.
func (s *Shim) deleteContainer(a Args, args []string) error {
	del := append(append([]string{}, args[:a.CommandIndex]...), "delete", "--force", a.ID)
	code, err := s.Runtime.Run(del)
	switch {
	case err != nil:
		return fmt.Errorf("failed to delete the container: %w", err)
	case code != 0:
		return fmt.Errorf("failed to delete the container: runc delete --force exited with status %d", code)
	}
	return nil
}

// netNS is an open network namespace file.
type netNS struct{ fd int }

func (n *netNS) Fd() int { return n.fd }

func (n *netNS) Close() error { return unix.Close(n.fd) }

// openNetNSOf opens the network namespace of process pid. A pidfd taken
// first and checked after the open proves the process did not exit in
// between, so the namespace cannot be that of a process that reused the
// pid.
func openNetNSOf(pid int) (*netNS, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("the container's process %d is gone (%v)", pid, err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to open the network namespace of process %d: %w", pid, err)
	}
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("the container's process %d exited before its rules were in place", pid)
	}
	return &netNS{fd: fd}, nil
}

// sameNS reports whether the open namespace is the one at path (device
// and inode, as the kernel identifies namespaces). A path that cannot be
// read counts as different.
func sameNS(n *netNS, path string) bool {
	var a, b syscall.Stat_t
	if err := syscall.Fstat(n.fd, &a); err != nil {
		return false
	}
	if err := syscall.Stat(path, &b); err != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// cpuTime is the CPU time (user and system) the shim's process has used:
// the install's share of it tells work from waiting for a CPU on a busy
// host.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadSwitches are the calling thread's context switches so far:
// voluntary (it waited for something) and involuntary (it was preempted),
// its time spent runnable but waiting for a CPU (-1: unknown), and the
// thread. The install's share shows where its wall time went when that is
// far above its CPU time on a busy host.
type threadSwitches struct {
	tid                    int
	voluntary, involuntary int64
	queued                 time.Duration
}

func switches() threadSwitches {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return threadSwitches{}
	}
	return threadSwitches{tid: unix.Gettid(), voluntary: ru.Nvcsw, involuntary: ru.Nivcsw, queued: runDelay()}
}

// runDelay is the calling thread's time on the run queue so far: the
// second field of /proc/thread-self/schedstat (the kernel's sched_info,
// kept whatever the schedstats setting; cfront_run_delay reads it for the
// C fronts). -1 where it cannot be read.
func runDelay() time.Duration {
	b, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return -1
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || ns < 0 {
		return -1
	}
	return time.Duration(ns)
}

// since renders the switches between a and s as "voluntary/involuntary"
// and the wait for a CPU as " queued=<duration>" when it is known, or
// "moved" when the install did not stay on one thread (the Go runtime
// moved its goroutine, itself a wait for the other thread to run).
func (s threadSwitches) since(a threadSwitches) string {
	if s.tid != a.tid {
		return "moved"
	}
	out := fmt.Sprintf("%d/%d", s.voluntary-a.voluntary, s.involuntary-a.involuntary)
	if a.queued >= 0 && s.queued >= a.queued {
		out += " queued=" + (s.queued - a.queued).Round(time.Microsecond).String()
	}
	return out
}
