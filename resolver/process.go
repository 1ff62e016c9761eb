package resolver

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/policy"
)

// A container's resolver is a process of its own, started by the hook
// that installs the container's rules (see Start) and living as long as
// the container's first process: it serves from sockets made in the
// container's network namespace, drops root, and at the end writes what
// it saw to a state file in the bundle, which the poststop hook reads
// (see Collect).

// StateName is the state file's name in the bundle.
const StateName = "sforge-resolver.json"

// Descriptors the child inherits, in this order from 3.
const (
	fdNetNS = 3 + iota
	fdState
	fdReady
	fdPid
)

// unprivileged is the user and group the child serves as: nobody.
const unprivileged = 65534

// State is the state file's content.
type State struct {
	Pid int `json:"pid"`
	// Done is set by the resolver's last write, at its end.
	Done  bool   `json:"done,omitempty"`
	Stats *Stats `json:"stats,omitempty"`
}

// Start runs the resolver for a container: exe with args (a program that
// calls Child with what follows them) is started in a session of its own,
// enters netns (an open network namespace), listens on listen:53 there
// over UDP and TCP, and answers allow's names until the process pid ends
// or it receives SIGTERM. It returns once the resolver serves, or with the
// reason it cannot.
func Start(exe string, args []string, netns *os.File, pid int, listen netip.Addr, allow policy.Allowlist, statePath string) (int, error) {
	value, err := policy.Encode(allow)
	if err != nil {
		return 0, err
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return 0, fmt.Errorf("the container's process %d: pidfd_open: %w", pid, err)
	}
	pidFile := os.NewFile(uintptr(pidfd), "pidfd")
	defer pidFile.Close()
	state, err := os.OpenFile(statePath, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer state.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	cmd := exec.Command(exe, append(args, "--listen", listen.String(), "--allowlist", value)...)
	cmd.ExtraFiles = []*os.File{netns, state, w, pidFile}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		_ = os.Remove(statePath)
		return 0, err
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		ready <- strings.TrimSpace(line)
	}()
	var msg string
	select {
	case msg = <-ready:
	case <-time.After(5 * time.Second):
		msg = "not serving after 5s"
	}
	if msg != "ok" {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
		_ = os.Remove(statePath)
		if msg == "" {
			msg = "it exited before serving"
		}
		return 0, errors.New(strings.TrimPrefix(msg, "error: "))
	}
	// Never waited for: it outlives the hook and is reaped by whoever
	// adopts it.
	p := cmd.Process.Pid
	_ = cmd.Process.Release()
	return p, nil
}

// Child is the resolver's process, with the arguments after those Start
// was given. It returns the exit status.
func Child(args []string) int {
	ready := os.NewFile(fdReady, "ready")
	fail := func(err error) int {
		fmt.Fprintf(ready, "error: %v\n", err)
		return 1
	}
	var listen, value string
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "--listen":
			listen = args[i+1]
		case "--allowlist":
			value = args[i+1]
		}
	}
	addr, err := netip.ParseAddr(listen)
	if err != nil {
		return fail(fmt.Errorf("--listen %q: %w", listen, err))
	}
	allow, err := policy.Decode(value)
	if err != nil {
		return fail(err)
	}
	udp, tcp, err := listenIn(fdNetNS, netip.AddrPortFrom(addr, 53))
	if err != nil {
		return fail(err)
	}
	// The sockets are all it needs: serve as nobody, unable to gain
	// privileges again. A user namespace that does not map nobody keeps
	// the user it has; the sockets are still the only way in.
	_ = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	if syscall.Setgroups(nil) == nil && syscall.Setgid(unprivileged) == nil {
		_ = syscall.Setuid(unprivileged)
	}
	stateFile := os.NewFile(fdState, "state")
	if err := writeState(stateFile, State{Pid: os.Getpid()}); err != nil {
		return fail(err)
	}
	s := New(FromAllowlist(allow))
	go func() { _ = s.ServeUDP(udp) }()
	go func() { _ = s.ServeTCP(tcp) }()
	fmt.Fprintln(ready, "ok")
	ready.Close()

	end := make(chan struct{}, 2)
	go func() {
		fds := []unix.PollFd{{Fd: fdPid, Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); !errors.Is(err, unix.EINTR) {
				break
			}
		}
		end <- struct{}{}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-end:
	case <-sig:
	}
	udp.Close()
	tcp.Close()
	st := s.Stats()
	if err := writeState(stateFile, State{Pid: os.Getpid(), Done: true, Stats: &st}); err != nil {
		return 1
	}
	return 0
}

// listenIn makes the resolver's sockets in the network namespace open at
// fd, on a thread locked there for good (it is the process's only use).
func listenIn(fd int, ap netip.AddrPort) (*net.UDPConn, *net.TCPListener, error) {
	runtime.LockOSThread()
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return nil, nil, fmt.Errorf("failed to enter the container's network namespace: %w", err)
	}
	udp, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return nil, nil, err
	}
	tcp, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(ap))
	if err != nil {
		udp.Close()
		return nil, nil, err
	}
	return udp, tcp, nil
}

func writeState(f *os.File, st State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt(append(b, '\n'), 0)
	return err
}

// Collect reads what the container's resolver saw from its state file,
// waiting up to wait for its last write (it ends with the container's
// first process, which poststop follows), and removes the file. A
// resolver still running then is told to stop and given the same time
// again. found is false when the container had no resolver.
func Collect(statePath string, wait time.Duration) (st Stats, found bool, err error) {
	read := func() (State, error) {
		var s State
		b, err := os.ReadFile(statePath)
		if err != nil {
			return s, err
		}
		if err := json.Unmarshal(b, &s); err != nil {
			return s, fmt.Errorf("%s: %w", statePath, err)
		}
		return s, nil
	}
	s, err := read()
	if errors.Is(err, os.ErrNotExist) {
		return Stats{}, false, nil
	}
	defer os.Remove(statePath)
	signalled := false
	deadline := time.Now().Add(wait)
	for err == nil && !s.Done {
		if time.Now().After(deadline) {
			if signalled || s.Pid <= 0 || !isResolver(s.Pid) {
				break
			}
			_ = syscall.Kill(s.Pid, syscall.SIGTERM)
			signalled, deadline = true, time.Now().Add(wait)
		}
		time.Sleep(10 * time.Millisecond)
		s, err = read()
	}
	switch {
	case err != nil:
		return Stats{}, true, err
	case !s.Done || s.Stats == nil:
		return Stats{}, true, fmt.Errorf("the container's resolver (pid %d) left no record", s.Pid)
	}
	return *s.Stats, true, nil
}

// isResolver reports whether pid is still a resolver process (and not a
// process that reused its number).
func isResolver(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "\x00--allowlist\x00")
}
