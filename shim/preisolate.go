package shim

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/nftables"
)

// The isolated create of a container with a network namespace of its own:
// the namespace exists, with its rules, before the container does.
//
// runc would create the container's network namespace itself. Instead the
// shim creates it, brings its loopback up (what runc does for a new one),
// installs and verifies the rules in it, and names it in config.json by a
// path that only the shim's process holds open: /proc/<shim pid>/fd/<n>.
// Then it execs runc with the command line unchanged, keeping its pid and
// that descriptor, and runc's init joins the namespace by that path. The
// container's process is born into a namespace whose rules are already in
// place, and no process of sforge's outlives the exec.
//
// Nothing else holds the namespace: when runc exits the descriptor closes,
// and the namespace lives exactly as long as the container's processes, as
// a new one would. If anything fails before the exec, the shim exits with
// one line and nothing was created (the namespace goes with the shim).
//
// A container with a user namespace keeps the create-then-install path:
// its network namespace must belong to its user namespace, which only
// runc creates.
//
// The path is recorded in an annotation, so that a later create or run of
// the same bundle (people rerun `runc run` on one bundle) reads it as the
// new namespace it stands for instead of joining a descriptor that no
// longer exists.

// preisolatedAnnotation records the network namespace path the shim wrote
// into config.json.
const preisolatedAnnotation = "sforge.io/preisolated-netns"

// forgetPreisolated turns a namespace path the shim wrote on an earlier
// create of this bundle back into the new namespace it stood for.
func forgetPreisolated(spec *Spec) error {
	mark, ok := spec.Annotations()[preisolatedAnnotation]
	if !ok {
		return nil
	}
	found, path, err := spec.NetworkNamespace()
	if err != nil {
		return err
	}
	if found && path == mark {
		if err := spec.SetNetworkNamespacePath(""); err != nil {
			return err
		}
	}
	return spec.SetAnnotation(preisolatedAnnotation, "")
}

// madeNetNS is a network namespace being made for a container, on a
// thread of its own, while the shim reads the spec.
type madeNetNS struct {
	done chan struct{}
	fd   int
	err  error
}

// makeNetNS starts making a network namespace whose descriptor will be at
// least minFD. The thread that makes it stays in it and ends with its
// goroutine (it is never unlocked).
func makeNetNS(minFD int) *madeNetNS {
	m := &madeNetNS{done: make(chan struct{}), fd: -1}
	go func() {
		defer close(m.done)
		runtime.LockOSThread()
		m.fd, m.err = newNetNS(minFD)
	}()
	return m
}

// wait returns the namespace's descriptor once it is made.
func (m *madeNetNS) wait() (int, error) {
	<-m.done
	return m.fd, m.err
}

// discard closes the namespace (unused: the container gets another one),
// so that no process the shim starts or becomes inherits it.
func (m *madeNetNS) discard() {
	if m == nil {
		return
	}
	if fd, err := m.wait(); err == nil {
		_ = unix.Close(fd)
	}
}

// minNetNSFD is the lowest descriptor the namespace may take: those from
// 3 on that runc passes to the container (socket activation first, then
// --preserve-fds) stay the caller's.
func (s *Shim) minNetNSFD(a Args) int {
	minFD := 3 + a.PreserveFDs
	if n, err := strconv.Atoi(s.getenv("LISTEN_FDS")); err == nil && n > 0 {
		minFD += n
	}
	return minFD
}

// preisolate installs the rules in the namespace made for the container,
// points the spec at it and writes the spec back. The namespace's
// descriptor stays open (and open across exec) in the shim's process; the
// caller execs runc next.
func (s *Shim) preisolate(a Args, spec *Spec, p *plan) error {
	type installed struct {
		rep         engine.Report
		cpu         time.Duration
		switches    string
		err         error
		started, at time.Time
	}
	// The install's work that needs no namespace, done once (rendering
	// and encoding the rules), while the namespace is being made.
	if _, ok := p.engine.(*nftables.Engine); ok {
		_ = nftables.Warm(a.ID, p.allow)
	}
	fd, err := p.netns.wait()
	if err != nil {
		return &RefusedError{ID: a.ID, Cause: err.Error(), Fix: "nothing was created; check the host with `sforge doctor`"}
	}
	// The rules go in from an ordinary goroutine while the spec is
	// written back. (Not from the thread that made the namespace: on a
	// locked thread every netlink reply costs two thread hand-offs, and
	// the install took 3-5 ms instead of 1.)
	done := make(chan installed, 1)
	go func() {
		r := installed{started: time.Now()}
		cpu0, sw0 := cpuTime(), switches()
		r.rep, r.err = p.engine.Install(engine.Target{NetNS: fmt.Sprintf("/proc/self/fd/%d", fd), ID: a.ID}, p.allow)
		r.cpu, r.switches, r.at = cpuTime()-cpu0, switches().since(sw0), time.Now()
		done <- r
	}()
	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
	if err := spec.SetNetworkNamespacePath(path); err != nil {
		return fmt.Errorf("container %s: failed to name its network namespace in the spec: %w", a.ID, err)
	}
	if err := spec.SetAnnotation(preisolatedAnnotation, path); err != nil {
		return fmt.Errorf("container %s: %w", a.ID, err)
	}
	if err := spec.Flush(); err != nil {
		return fmt.Errorf("container %s: %w", a.ID, err)
	}
	r := <-done
	if r.err != nil {
		return &RefusedError{ID: a.ID, Cause: "failed to install the egress rules: " + r.err.Error(), Fix: "nothing was created; " + installFix(r.err)}
	}
	if s.Log != nil {
		s.Log.Infof("container %s: isolated before start (netns=made-by-sforge engine=%s table=%s rules=%d endpoints=%d resolvers=%d ipv6=%s install=%s install-cpu=%s total=%s switches=%s spec=%s), %s dropped",
			a.ID, r.rep.Engine, r.rep.Chain, r.rep.Rules, len(p.allow.Endpoints), len(p.allow.DNS), r.rep.IPv6,
			r.rep.Duration.Round(time.Microsecond), r.cpu.Round(time.Microsecond), r.at.Sub(r.started).Round(time.Microsecond), r.switches,
			p.prepared.Round(time.Microsecond), dropCapability)
	}
	return nil
}

// newNetNS moves the calling thread, which must be locked to it and never
// unlocked, into a new network namespace with its loopback up, and
// returns that namespace open at a descriptor of at least minFD that stays
// open across exec.
func newNetNS(minFD int) (int, error) {
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return -1, fmt.Errorf("failed to create the container's network namespace: %w", err)
	}
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("failed to open the new network namespace: %w", err)
	}
	defer unix.Close(fd)
	if err := loopbackUp(); err != nil {
		return -1, err
	}
	// F_DUPFD, not F_DUPFD_CLOEXEC: runc must inherit it.
	kept, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD, minFD)
	if err != nil {
		return -1, fmt.Errorf("failed to keep the new network namespace open: %w", err)
	}
	return kept, nil
}

// loopbackUp sets lo up in the calling thread's network namespace, as
// runc does for a namespace it creates (and not for one given by path).
func loopbackUp() error {
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("failed to bring up the loopback interface: %w", err)
	}
	defer unix.Close(sock)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("failed to bring up the loopback interface: %w", err)
	}
	if err := unix.IoctlIfreq(sock, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("failed to bring up the loopback interface: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(sock, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("failed to bring up the loopback interface: %w", err)
	}
	return nil
}
