package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/proxy/proxytest"
)

// proxyBuildSforge builds cmd/sforge from this tree into a temp dir, so the
// test runs the code under test rather than whatever bin/ holds.
func proxyBuildSforge(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "sforge")
	cmd := exec.Command(goBin, "build", "-o", out, "./cmd/sforge")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("failed to build sforge: %v\n%s", err, b)
	}
	return out
}

// proxyFreePort returns a loopback port that was free a moment ago.
func proxyFreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proxyLog is a process's stderr, readable while it runs.
type proxyLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *proxyLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *proxyLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proxyProc is a running `sforge proxy`.
type proxyProc struct {
	cmd  *exec.Cmd
	url  string // http://ADDR:PORT
	logs *proxyLog
	done chan error
}

// proxyStart runs `sforge proxy` on 127.0.0.1 with exactly env (nothing of
// the test's environment leaks in, proxies included) and waits until it
// listens. The test's cleanup stops it by PID.
func proxyStart(t *testing.T, bin string, env []string, args ...string) *proxyProc {
	t.Helper()
	return proxyStartAt(t, "", "127.0.0.1", proxyFreePort(t), bin, env, args...)
}

// proxyStartAt is proxyStart on addr:port in the network namespace netns
// ("" for this one).
func proxyStartAt(t *testing.T, netns, addr string, port int, bin string, env []string, args ...string) *proxyProc {
	t.Helper()
	argv := append([]string{bin, "proxy", "--listen", addr, "--port", strconv.Itoa(port)}, args...)
	if netns != "" {
		argv = append([]string{"nsenter", "--net=" + netns, "--"}, argv...)
	}
	p := &proxyProc{
		cmd:  exec.Command(argv[0], argv[1:]...),
		url:  "http://" + net.JoinHostPort(addr, strconv.Itoa(port)),
		logs: &proxyLog{},
		done: make(chan error, 1),
	}
	p.cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("failed to start sforge proxy: %v", err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.stop(t) })
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(p.logs.String(), "msg=listening") {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("sforge proxy exited before listening: %v\n%s", err, p.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sforge proxy did not listen within 15s:\n%s", p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p
}

// stop sends SIGTERM and waits; SIGKILL (by PID) if it does not exit.
func (p *proxyProc) stop(t *testing.T) error {
	if p.cmd.ProcessState != nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(40 * time.Second):
		_ = p.cmd.Process.Kill()
		err := <-p.done
		p.done <- err
		t.Errorf("sforge proxy did not stop on SIGTERM within 40s; killed\n%s", p.logs)
		return err
	}
}

// proxyCurl runs the real curl client with a bounded time, never through a
// proxy from the environment.
func proxyCurl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append([]string{"-sS", "--noproxy", "*", "--max-time", "25"}, args...)
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "curl", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("curl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// proxyArrival is one event as the client saw it.
type proxyArrival struct {
	ev proxytest.Event
	at time.Time
}

// proxyCurlSSE streams url with `curl -N` (no output buffering) and hands
// each event to onEvent as it arrives, with the time it arrived. It returns
// when the stream ends.
func proxyCurlSSE(t *testing.T, url string, onEvent func(proxyArrival)) ([]proxyArrival, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "curl", "-sS", "-N", "--noproxy", "*", "--max-time", "55", url)
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	br := bufio.NewReader(out)
	var got []proxyArrival
	var readErr error
	for {
		ev, err := proxytest.NextEvent(br)
		if err != nil {
			if err != io.EOF { // a bare io.EOF is a clean end between events
				readErr = err
			}
			break
		}
		a := proxyArrival{ev: ev, at: time.Now()}
		got = append(got, a)
		if onEvent != nil {
			onEvent(a)
		}
	}
	if err := cmd.Wait(); err != nil && readErr == nil {
		readErr = fmt.Errorf("curl: %v: %s", err, stderr.String())
	}
	return got, readErr
}

// squidProc is a private squid: its own config, logs, pid file and port in
// a temp dir, shared-memory segments under a unique service name.
type squidProc struct {
	addr      string // 127.0.0.1:PORT
	accessLog string
	cacheLog  string
}

// proxyStartSquid starts Debian's squid as a forward proxy that allows only
// CONNECT to proxytest.Host:upstreamPort, which its own hosts file maps to
// 127.0.0.1; its DNS points at loopback, so it never queries anyone. It is
// stopped by PID when the test ends.
func proxyStartSquid(t *testing.T, upstreamPort int) *squidProc {
	t.Helper()
	squid := testenv.RequireBinary(t, "squid")
	dir, err := os.MkdirTemp("", "sforge-squid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	effectiveUser := ""
	if os.Geteuid() == 0 {
		// Squid started as root drops to cache_effective_user, which must
		// be able to write its logs here.
		u, err := user.Lookup("proxy")
		if err != nil {
			t.Fatalf("squid runs as root only with an unprivileged user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		effectiveUser = "cache_effective_user proxy\n"
	}
	port := proxyFreePort(t)
	s := &squidProc{
		addr:      fmt.Sprintf("127.0.0.1:%d", port),
		accessLog: filepath.Join(dir, "access.log"),
		cacheLog:  filepath.Join(dir, "cache.log"),
	}
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 "+proxytest.Host+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "squid.conf")
	pidFile := filepath.Join(dir, "squid.pid")
	cfg := fmt.Sprintf(`http_port %s
pid_filename %s
cache_log %s
access_log stdio:%s
coredump_dir %s
hosts_file %s
dns_nameservers 127.0.0.1
visible_hostname sforge-test
pinger_enable off
cache deny all
cache_mem 8 MB
shutdown_lifetime 0 seconds
acl from_loopback src 127.0.0.0/8
acl test_api dstdomain %s
acl test_port port %d
acl CONNECT method CONNECT
http_access allow CONNECT from_loopback test_api test_port
http_access deny all
%s`, s.addr, pidFile, s.cacheLog, s.accessLog, dir, hosts, proxytest.Host, upstreamPort, effectiveUser)
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	service := fmt.Sprintf("sfpx%d", time.Now().UnixNano()%1e9)
	var out proxyLog
	cmd := exec.Command(squid, "-N", "-n", service, "-f", conf)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("failed to start squid: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("squid (pid %d) did not stop on SIGTERM; killed", cmd.Process.Pid)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
			return s
		}
		select {
		case err := <-done:
			log, _ := os.ReadFile(s.cacheLog)
			t.Fatalf("squid exited: %v\n%s\n%s", err, out.String(), log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.cacheLog)
			t.Fatalf("squid did not listen on %s within 20s\n%s\n%s", s.addr, out.String(), log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAccessLog waits for a line containing all of want in squid's access
// log; squid writes a CONNECT's line when the tunnel closes.
func (s *squidProc) waitAccessLog(t *testing.T, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, _ := os.ReadFile(s.accessLog)
		for _, line := range strings.Split(string(b), "\n") {
			ok := line != ""
			for _, w := range want {
				ok = ok && strings.Contains(line, w)
			}
			if ok {
				return line
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(s.cacheLog)
			t.Fatalf("squid's access log has no line with %q:\n%s\ncache.log:\n%s", want, b, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
