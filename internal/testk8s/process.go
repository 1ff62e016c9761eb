package testk8s

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Process is a daemon the harness started: its own log file, stopped by
// its PID (never by name: other tests on the machine run their own).
type Process struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string
	done    chan struct{}
	waitErr error
}

// startProcess starts path with args, stdout and stderr going to logPath,
// inside the network namespace at netns when that is not empty.
func startProcess(name, logPath, netns string, path string, args ...string) (*Process, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("failed to create log %s: %w", logPath, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "KUBECONFIG=/dev/null") // only explicit kubeconfigs
	// Pdeathsig: if the test binary dies (panic, timeout) the daemons die
	// with it instead of holding ports and CPU. It fires when the *thread*
	// that forked exits, so the forking goroutine keeps its thread locked
	// until the child is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &Process{Name: name, Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		// The child inherits the network namespace of the thread that
		// forks it; this thread is thrown away afterwards, so switching it
		// leaks into nothing else.
		if err := setNetNS(netns); err != nil {
			f.Close()
			started <- err
			return
		}
		if err := cmd.Start(); err != nil {
			f.Close()
			started <- err
			return
		}
		started <- nil
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("failed to start %s: %w", name, err)
	}
	return p, nil
}

func setNetNS(path string) error {
	if path == "" {
		return nil
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("failed to open network namespace %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("failed to enter network namespace %s: %w", path, err)
	}
	return nil
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process by PID: SIGTERM, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.Cmd.Process.Kill()
	select {
	case <-p.done:
		return fmt.Errorf("%s (pid %d) ignored SIGTERM for %s and was killed", p.Name, p.Cmd.Process.Pid, grace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) survived SIGKILL", p.Name, p.Cmd.Process.Pid)
	}
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.LogPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// portInUse reports whether the process died because a port was taken
// between freePorts and its bind: another test on the machine won the race.
func (p *Process) portInUse() bool {
	data, _ := os.ReadFile(p.LogPath)
	return p.Exited() && strings.Contains(string(data), "address already in use")
}

// freePorts returns n distinct loopback TCP ports free right now. The
// caller retries when one is taken before its daemon binds it.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("failed to find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// StartProcessIn starts path with args as a daemon of its own, stdout and
// stderr going to logPath, inside the network namespace at netns.
func StartProcessIn(name, logPath, netns, path string, args ...string) (*Process, error) {
	return startProcess(name, logPath, netns, path, args...)
}
