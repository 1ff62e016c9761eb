package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/proxy/proxytest"
)

// Request counts: bounded, and small enough for the 2-core machine. Every
// phase interleaves the three paths so that drift and noise hit all alike.
const (
	proxyBenchWarmup      = 100
	proxyBenchLatencyRuns = 1500 // sequential requests per path
	proxyBenchRounds      = 3    // throughput rounds, paths rotated each round
	proxyBenchSmallPerRun = 1000 // small requests per path per round
	proxyBenchSmallConc   = 16
	proxyBenchBigPerRun   = 8 // large downloads per path per round
	proxyBenchBigSize     = 8 << 20
	proxyBenchBigConc     = 4
	proxyBenchSSERuns     = 150 // streams per path
	proxyBenchBodySize    = 2 << 10
)

// proxyBenchPath is one way from the client to the upstream.
type proxyBenchPath struct {
	name   string
	base   string
	client *http.Client
}

// BenchmarkProxy compares, on one loopback path and in one run, a client
// talking to the TLS upstream directly, through `sforge proxy` and through
// nginx as a reverse proxy (proxy_buffering off, upstream keep-alive):
// added latency (p50/p99) of a small API-like request, throughput of small
// requests and of large bodies, and the delay to the first server-sent
// event. All three reach the upstream over HTTP/1.1 with TLS and kept-alive
// connections, and both proxies log each request to a file.
func BenchmarkProxy(b *testing.B) {
	nginx := testenv.RequireBinary(b, "nginx")
	up := proxytest.NewUpstream(b, proxytest.Options{})
	dir := b.TempDir()
	ca, err := up.WriteCA(dir)
	if err != nil {
		b.Fatal(err)
	}
	sforgeURL := proxyBenchStartSforge(b, dir, ca, up)
	nginxURL := proxyBenchStartNginx(b, nginx, ca, up)

	direct := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: up.CertPool()},
		DialContext:         proxytest.MapHost(),
		MaxIdleConnsPerHost: 64,
		DisableCompression:  true,
	}
	plain := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	paths := []proxyBenchPath{
		{"direct", up.URL(), &http.Client{Transport: direct}},
		{"sforge", sforgeURL, &http.Client{Transport: plain}},
		{"nginx", nginxURL, &http.Client{Transport: plain}},
	}
	body := bytes.Repeat([]byte("a"), proxyBenchBodySize)

	lat := proxyBenchLatency(b, paths, proxyBenchWarmup, proxyBenchLatencyRuns, body)
	tp := proxyBenchThroughput(b, paths, body)
	first := proxyBenchFirstEvents(b, paths)
	for _, p := range paths {
		p.client.CloseIdleConnections()
	}

	var report strings.Builder
	fmt.Fprintf(&report, "\n%d sequential POSTs of %d B per path (after %d warm-up), throughput in %d rotated rounds, %d streams per path; GOMAXPROCS=%d\n\n",
		proxyBenchLatencyRuns, proxyBenchBodySize, proxyBenchWarmup, proxyBenchRounds, proxyBenchSSERuns, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&report, "| path | p50 | p99 | added p50 | added p99 | small req/s (c=%d) | %d MiB bodies MiB/s (c=%d) | first event p50 | first event p99 |\n",
		proxyBenchSmallConc, proxyBenchBigSize>>20, proxyBenchBigConc)
	report.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	d50, d99 := proxyBenchPct(lat["direct"], 50), proxyBenchPct(lat["direct"], 99)
	for _, p := range paths {
		p50, p99 := proxyBenchPct(lat[p.name], 50), proxyBenchPct(lat[p.name], 99)
		rps, mibps := tp.rates(p.name)
		f50, f99 := proxyBenchPct(first[p.name], 50), proxyBenchPct(first[p.name], 99)
		fmt.Fprintf(&report, "| %s | %s | %s | %s | %s | %.0f | %.0f | %s | %s |\n", p.name,
			proxyBenchUS(p50), proxyBenchUS(p99), proxyBenchUS(p50-d50), proxyBenchUS(p99-d99), rps, mibps, proxyBenchUS(f50), proxyBenchUS(f99))
		b.ReportMetric(float64(p50.Microseconds()), p.name+"-p50-µs")
		b.ReportMetric(rps, p.name+"-req/s")
	}
	b.Log(report.String())
}

// proxyBenchLatency times runs sequential POSTs of body per path, after
// warmup, the paths in turn so that drift hits all alike.
func proxyBenchLatency(b *testing.B, paths []proxyBenchPath, warmup, runs int, body []byte) map[string][]time.Duration {
	lat := map[string][]time.Duration{}
	for i := range warmup + runs {
		for _, p := range paths {
			d, err := proxyBenchRequest(p, "/v1/messages", body)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			if i >= warmup {
				lat[p.name] = append(lat[p.name], d)
			}
		}
	}
	return lat
}

// proxyBenchRates are the throughput rounds' totals per path.
type proxyBenchRates struct {
	smallN   map[string]int
	smallT   map[string]time.Duration
	bigBytes map[string]int64
	bigT     map[string]time.Duration
}

// rates are small requests per second and MiB per second of large bodies.
func (r proxyBenchRates) rates(path string) (float64, float64) {
	return float64(r.smallN[path]) / r.smallT[path].Seconds(), float64(r.bigBytes[path]) / (1 << 20) / r.bigT[path].Seconds()
}

// proxyBenchThroughput runs fixed batches of small POSTs and of large
// downloads per path, the paths rotated each round.
func proxyBenchThroughput(b *testing.B, paths []proxyBenchPath, body []byte) proxyBenchRates {
	r := proxyBenchRates{map[string]int{}, map[string]time.Duration{}, map[string]int64{}, map[string]time.Duration{}}
	for round := range proxyBenchRounds {
		for k := range paths {
			p := paths[(round+k)%len(paths)]
			d, _, err := proxyBenchBatch(p, proxyBenchSmallPerRun, proxyBenchSmallConc, func() (int64, error) {
				_, err := proxyBenchRequest(p, "/v1/messages", body)
				return 0, err
			})
			if err != nil {
				b.Fatalf("%s small: %v", p.name, err)
			}
			r.smallN[p.name] += proxyBenchSmallPerRun
			r.smallT[p.name] += d
			d, n, err := proxyBenchBatch(p, proxyBenchBigPerRun, proxyBenchBigConc, func() (int64, error) {
				return proxyBenchDownload(p, proxyBenchBigSize)
			})
			if err != nil {
				b.Fatalf("%s big: %v", p.name, err)
			}
			r.bigBytes[p.name] += n
			r.bigT[p.name] += d
		}
	}
	return r
}

// proxyBenchFirstEvents times, per path, request start to the first
// server-sent event, the paths in turn.
func proxyBenchFirstEvents(b *testing.B, paths []proxyBenchPath) map[string][]time.Duration {
	first := map[string][]time.Duration{}
	for range proxyBenchSSERuns {
		for _, p := range paths {
			d, err := proxyBenchFirstEvent(p)
			if err != nil {
				b.Fatalf("%s sse: %v", p.name, err)
			}
			first[p.name] = append(first[p.name], d)
		}
	}
	return first
}

func proxyBenchUS(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

func proxyBenchPct(ds []time.Duration, pct int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, len(s)*pct/100)]
}

// proxyBenchRequest POSTs body and reads the whole answer.
func proxyBenchRequest(p proxyBenchPath, path string, body []byte) (time.Duration, error) {
	start := time.Now()
	resp, err := p.client.Post(p.base+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return time.Since(start), err
}

func proxyBenchDownload(p proxyBenchPath, size int) (int64, error) {
	resp, err := p.client.Get(fmt.Sprintf("%s/bytes?n=%d", p.base, size))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && (resp.StatusCode != http.StatusOK || n != int64(size)) {
		err = fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
	}
	return n, err
}

// proxyBenchBatch runs n calls of f on conc workers and returns the wall time.
func proxyBenchBatch(_ proxyBenchPath, n, conc int, f func() (int64, error)) (time.Duration, int64, error) {
	var (
		mu    sync.Mutex
		total int64
		first error
		wg    sync.WaitGroup
	)
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				k, err := f()
				mu.Lock()
				total += k
				if err != nil && first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return time.Since(start), total, first
}

// proxyBenchFirstEvent opens a stream whose second event comes 20 ms after
// the first and returns the time until the first event was parsed.
func proxyBenchFirstEvent(p proxyBenchPath) (time.Duration, error) {
	start := time.Now()
	resp, err := p.client.Get(p.base + "/sse?n=2&gap=20ms")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := proxytest.NextEvent(br); err != nil {
		return 0, err
	}
	d := time.Since(start)
	_, err = io.Copy(io.Discard, br)
	return d, err
}

func proxyBenchFreePort(b *testing.B) int {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func proxyBenchWaitPort(b *testing.B, addr string, exited <-chan error, logFile string) {
	var d net.Dialer
	proxyBenchWaitDial(b, d.DialContext, addr, exited, logFile)
}

// proxyBenchWaitDial waits until dial reaches addr, failing when the
// process behind it exits first or after 20 s.
func proxyBenchWaitDial(b *testing.B, dial func(context.Context, string, string) (net.Conn, error), addr string, exited <-chan error, logFile string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := dial(ctx, "tcp", addr)
		cancel()
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logFile)
			b.Fatalf("process for %s exited: %v\n%s", addr, err, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile)
			b.Fatalf("nothing listens on %s after 20s\n%s", addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// proxyBenchRun starts a process with its output in logFile and stops it
// by PID with sig when the benchmark ends.
func proxyBenchRun(b *testing.B, cmd *exec.Cmd, logFile string, sig syscall.Signal) <-chan error {
	f, err := os.Create(logFile)
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		b.Fatalf("failed to start %s: %v", cmd.Path, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); f.Close() }()
	b.Cleanup(func() {
		_ = cmd.Process.Signal(sig)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			b.Errorf("%s (pid %d) did not stop; killed", cmd.Path, cmd.Process.Pid)
		}
	})
	return done
}

// proxyBenchStartSforge builds and starts `sforge proxy` as its own
// process, like a user runs it, logging to a file.
func proxyBenchStartSforge(b *testing.B, dir, ca string, up *proxytest.Upstream) string {
	bin := proxyBenchBuildSforge(b, dir)
	port := proxyBenchFreePort(b)
	cmd := exec.Command(bin, "proxy", "--listen", "127.0.0.1", "--port", strconv.Itoa(port), "--target", up.LoopbackURL())
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SSL_CERT_FILE=" + ca}
	logFile := filepath.Join(dir, "sforge.log")
	done := proxyBenchRun(b, cmd, logFile, syscall.SIGTERM)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	proxyBenchWaitPort(b, addr, done, logFile)
	return "http://" + addr
}

// proxyBenchBuildSforge builds sforge from the tree into dir, as `make
// build` does.
func proxyBenchBuildSforge(b *testing.B, dir string) string {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(dir, "sforge")
	build := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/sforge")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("failed to build sforge: %v\n%s", err, out)
	}
	return bin
}

// proxyBenchStartNginx starts Debian's nginx with its own prefix: a reverse
// proxy tuned as one would for streaming APIs (no response or request
// buffering, HTTP/1.1 keep-alive to the upstream, TLS verified against the
// test CA), logging each request to a file like sforge does.
func proxyBenchStartNginx(b *testing.B, nginx, ca string, up *proxytest.Upstream) string {
	prefix, err := os.MkdirTemp("", "sforge-nginx-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(prefix) })
	// Workers run as nobody when nginx starts as root.
	if err := os.Chmod(prefix, 0o755); err != nil {
		b.Fatal(err)
	}
	port := proxyBenchFreePort(b)
	conf := filepath.Join(prefix, "nginx.conf")
	cfg := fmt.Sprintf(`daemon off;
master_process on;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
  access_log %[1]s/access.log;
  client_body_temp_path %[1]s/client_body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream api {
    server 127.0.0.1:%[2]d;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:%[3]d;
    location / {
      proxy_pass https://api;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host %[4]s:%[2]d;
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_ssl_server_name on;
      proxy_ssl_name %[4]s;
      proxy_ssl_verify on;
      proxy_ssl_trusted_certificate %[5]s;
      proxy_ssl_session_reuse on;
    }
  }
}
`, prefix, up.Port, port, proxytest.Host, ca)
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	logFile := filepath.Join(prefix, "stderr.log")
	cmd := exec.Command(nginx, "-p", prefix, "-c", conf, "-e", filepath.Join(prefix, "error.log"))
	done := proxyBenchRun(b, cmd, logFile, syscall.SIGTERM)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	proxyBenchWaitPort(b, addr, done, filepath.Join(prefix, "error.log"))
	return "http://" + addr
}
