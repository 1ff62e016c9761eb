package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sforge-dev/netiso/proxy/proxytest"
)

// syncBuffer collects log output written from the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type running struct {
	url    string // http://127.0.0.1:PORT
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

// startProxy runs a Proxy in-process on a loopback port. Unless the test
// set them, the upstream's CA is trusted, Host maps to 127.0.0.1 and no
// forward proxy is used (the environment of the test must not matter).
func startProxy(t *testing.T, up *proxytest.Upstream, c Config) *running {
	t.Helper()
	if c.RootCAs == nil {
		c.RootCAs = up.CertPool()
	}
	if c.DialContext == nil {
		c.DialContext = proxytest.MapHost()
	}
	if c.Proxy == nil {
		c.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	}
	logs := &syncBuffer{}
	c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{url: "http://" + ln.Addr().String(), logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(DefaultShutdownTimeout + 5*time.Second):
			t.Errorf("proxy did not stop")
		}
	})
	return r
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := ParseTarget("target", raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func getEcho(t *testing.T, req *http.Request) proxytest.Echo {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var e proxytest.Echo
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("not an echo: %v: %s", err, body)
	}
	return e
}

// TestPathJoinAndHost: the target's path prefixes the request's, the query
// passes through, and the upstream sees its own name in Host.
func TestPathJoinAndHost(t *testing.T) {
	up := proxytest.NewUpstream(t, proxytest.Options{})
	tests := []struct {
		target, request string
		wantPath        string
		wantQuery       string
		named           bool
	}{
		{target: "", request: "/v1/messages?beta=true", wantPath: "/v1/messages", wantQuery: "beta=true", named: true},
		{target: "/", request: "/v1/messages", wantPath: "/v1/messages", named: true},
		{target: "/gateway/anthropic", request: "/v1/messages", wantPath: "/gateway/anthropic/v1/messages"},
		{target: "/gateway/anthropic/", request: "/v1/messages", wantPath: "/gateway/anthropic/v1/messages"},
		{target: "/gateway", request: "/", wantPath: "/gateway/"},
		{target: "/a%20b", request: "/c%2Fd?x=1&x=2", wantPath: "/a b/c/d", wantQuery: "x=1&x=2"},
	}
	for _, tt := range tests {
		base := up.LoopbackURL()
		wantHost := fmt.Sprintf("127.0.0.1:%d", up.Port)
		if tt.named {
			base = up.URL()
			wantHost = fmt.Sprintf("%s:%d", proxytest.Host, up.Port)
		}
		t.Run(base+tt.target+" "+tt.request, func(t *testing.T) {
			px := startProxy(t, up, Config{Target: mustURL(t, base+tt.target)})
			req, _ := http.NewRequest(http.MethodPost, px.url+tt.request, strings.NewReader(`{"model":"x"}`))
			req.Host = "host.docker.internal:9090"
			e := getEcho(t, req)
			if e.Path != tt.wantPath || e.RawQuery != tt.wantQuery || e.Host != wantHost || e.Method != http.MethodPost || e.BodyLen != 13 {
				t.Fatalf("upstream saw %s %s ? %q host %q body %d; want path %s query %q host %s",
					e.Method, e.Path, e.RawQuery, e.Host, e.BodyLen, tt.wantPath, tt.wantQuery, wantHost)
			}
			for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "Forwarded"} {
				if v := e.Header.Get(h); v != "" {
					t.Errorf("upstream got %s: %s; the container's address must not leak", h, v)
				}
			}
		})
	}
}

// TestAPIKeyInjection: with a key, the upstream sees exactly the real key in
// the chosen header and none of the client's credentials; without one, the
// client's headers pass untouched.
func TestAPIKeyInjection(t *testing.T) {
	up := proxytest.NewUpstream(t, proxytest.Options{})
	const real = "sk-real-1234"
	tests := []struct {
		name       string
		key        string
		header     string
		clientSent map[string]string
		want       map[string]string // "" = must be absent
	}{
		{
			name: "default header for a generic target is Authorization Bearer",
			key:  real,
			want: map[string]string{"Authorization": "Bearer " + real, "X-Api-Key": ""},
		},
		{
			name:       "client's fake bearer replaced",
			key:        real,
			clientSent: map[string]string{"Authorization": "Bearer sk-fake"},
			want:       map[string]string{"Authorization": "Bearer " + real},
		},
		{
			name:       "x-api-key override replaces fake x-api-key and drops other credentials",
			key:        real,
			header:     "x-api-key",
			clientSent: map[string]string{"X-Api-Key": "sk-fake", "Authorization": "Bearer sk-fake2", "X-Goog-Api-Key": "g-fake"},
			want:       map[string]string{"X-Api-Key": real, "Authorization": "", "X-Goog-Api-Key": ""},
		},
		{
			name:       "custom header gets the bare key; other headers pass",
			key:        real,
			header:     "X-Gateway-Key",
			clientSent: map[string]string{"Anthropic-Version": "2023-06-01", "X-Gateway-Key": "fake"},
			want:       map[string]string{"X-Gateway-Key": real, "Anthropic-Version": "2023-06-01"},
		},
		{
			name:       "a Connection header cannot strip the injected key",
			key:        real,
			header:     "x-api-key",
			clientSent: map[string]string{"Connection": "X-Api-Key, Authorization"},
			want:       map[string]string{"X-Api-Key": real},
		},
		{
			name:       "no key: client's credentials pass through",
			clientSent: map[string]string{"X-Api-Key": "sk-client", "Authorization": "Bearer sk-client"},
			want:       map[string]string{"X-Api-Key": "sk-client", "Authorization": "Bearer sk-client"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			px := startProxy(t, up, Config{Target: mustURL(t, up.URL()), APIKey: tt.key, APIKeyHeader: tt.header})
			req, _ := http.NewRequest(http.MethodGet, px.url+"/v1/messages?key=query-secret", nil)
			for k, v := range tt.clientSent {
				req.Header.Set(k, v)
			}
			e := getEcho(t, req)
			for k, v := range tt.want {
				got := e.Header.Values(k)
				switch {
				case v == "" && len(got) != 0:
					t.Errorf("upstream got %s: %q, want none", k, got)
				case v != "" && (len(got) != 1 || got[0] != v):
					t.Errorf("upstream got %s: %q, want [%q]", k, got, v)
				}
			}
			logs := px.logs.String()
			for _, secret := range []string{real, "sk-fake", "query-secret"} {
				if strings.Contains(logs, secret) {
					t.Errorf("log shows %q:\n%s", secret, logs)
				}
			}
		})
	}
}

// TestAllowFrom: only clients inside one of the prefixes get through; the
// rest get a one-line 403 and a log line, and never reach the upstream.
func TestAllowFrom(t *testing.T) {
	up := proxytest.NewUpstream(t, proxytest.Options{})
	p1 := netip.MustParsePrefix
	tests := []struct {
		remote string
		allow  []netip.Prefix
		want   int
	}{
		{"127.0.0.1:5000", nil, 200},
		{"172.17.0.2:5000", nil, 200},
		{"[::1]:5000", nil, 200},
		{"203.0.113.9:5000", nil, 403},
		{"[2001:db8::1]:5000", nil, 403},
		{"172.17.0.2:5000", []netip.Prefix{p1("172.17.0.0/16")}, 200},
		{"127.0.0.1:5000", []netip.Prefix{p1("172.17.0.0/16")}, 403},
		{"[::ffff:172.17.0.2]:5000", []netip.Prefix{p1("172.17.0.0/16")}, 200},
		{"[fe80::1%eth0]:5000", []netip.Prefix{p1("fe80::/10")}, 200},
		{"203.0.113.9:5000", []netip.Prefix{p1("0.0.0.0/0")}, 200},
		{"203.0.113.9:5000", []netip.Prefix{}, 403}, // empty, not nil: nobody
		{"@", nil, 403}, // not an address (e.g. a unix socket)
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s in %v", tt.remote, tt.allow), func(t *testing.T) {
			logs := &syncBuffer{}
			p, err := New(Config{
				Target: mustURL(t, up.LoopbackURL()), AllowFrom: tt.allow, RootCAs: up.CertPool(),
				Logger: slog.New(slog.NewTextHandler(logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
			req.RemoteAddr = tt.remote
			w := httptest.NewRecorder()
			p.ServeHTTP(w, req)
			if w.Code != tt.want {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.want, w.Body)
			}
			if tt.want == 403 {
				body := w.Body.String()
				if body != "sforge proxy: client address is not in --allow-from\n" {
					t.Fatalf("403 body %q", body)
				}
				if !strings.Contains(logs.String(), "status=403") || !strings.Contains(logs.String(), "client="+tt.remote) {
					t.Fatalf("no log line for the refusal:\n%s", logs)
				}
			}
		})
	}
}

// TestAwaitClients: with AwaitClients the proxy serves, of its networks,
// only the workload Admit names; a neighbour gets 403 with the reason.
func TestAwaitClients(t *testing.T) {
	up := proxytest.NewUpstream(t, proxytest.Options{})
	p, err := New(Config{Target: mustURL(t, up.LoopbackURL()), AllowFrom: []netip.Prefix{netip.MustParsePrefix("172.17.0.0/16")},
		AwaitClients: true, RootCAs: up.CertPool()})
	if err != nil {
		t.Fatal(err)
	}
	p.Admit(netip.MustParseAddr("172.17.0.2"))
	for remote, want := range map[string]int{"172.17.0.2:5000": 200, "172.17.0.3:5000": 403, "10.0.0.1:5000": 403} {
		req := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
		req.RemoteAddr = remote
		w := httptest.NewRecorder()
		p.ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("%s: status %d, want %d: %s", remote, w.Code, want, w.Body)
		}
		if remote == "172.17.0.3:5000" && !strings.Contains(w.Body.String(), "this client may not use the proxy: not the workload's address") {
			t.Errorf("the neighbour's refusal: %q", w.Body)
		}
	}
}

// TestStreamingLockstep: the upstream sends event i+1 only after the client
// has received event i, so any buffering in the proxy stalls the stream
// (the upstream then ends it with an error event) instead of passing. Both
// server-sent events and a chunked stream of another type (NDJSON-style
// APIs) must flow, over HTTP/1.1 and HTTP/2 upstreams.
func TestStreamingLockstep(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, ctype := range []string{"text/event-stream", "application/x-ndjson"} {
			t.Run(fmt.Sprintf("upstream_h2=%v/%s", h2, ctype), func(t *testing.T) {
				testLockstep(t, h2, ctype)
			})
		}
	}
}

func testLockstep(t *testing.T, h2 bool, ctype string) {
	up := proxytest.NewUpstream(t, proxytest.Options{HTTP2: h2})
	px := startProxy(t, up, Config{Target: mustURL(t, up.URL())})
	resp, err := http.Get(px.url + "/sse?lockstep=1&n=6&ctype=" + url.QueryEscape(ctype))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != ctype {
		t.Fatalf("Content-Type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	for i := range 6 {
		ev, err := proxytest.NextEvent(br)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.I != i {
			t.Fatalf("got event %d, want %d", ev.I, i)
		}
		up.Ack()
	}
	if _, err := proxytest.NextEvent(br); err != io.EOF {
		t.Fatalf("after the last event: %v, want EOF", err)
	}
}

// TestUpgrade: a 101 response turns the connection into a two-way byte
// pipe through the proxy.
func TestUpgrade(t *testing.T) {
	up := proxytest.NewUpstream(t, proxytest.Options{HTTP2: true})
	px := startProxy(t, up, Config{Target: mustURL(t, up.URL())})
	conn, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, msg := range []string{"hello\n", "again\n"} {
		io.WriteString(conn, msg)
		line, err := br.ReadString('\n')
		if err != nil || line != "echo: "+msg {
			t.Fatalf("read %q, %v; want echo of %q", line, err, msg)
		}
	}
	conn.Close()
	waitFor(t, func() bool { return strings.Contains(px.logs.String(), "path=/upgrade status=101") }, px.logs)
}

func waitFor(t *testing.T, cond func() bool, logs *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in 5s; logs:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUpstreamUnreachable: a 502 with one line naming the upstream.
func TestUpstreamUnreachable(t *testing.T) {
	up := proxytest.NewUpstream(t, proxytest.Options{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	px := startProxy(t, up, Config{Target: mustURL(t, "https://"+dead)})
	resp, err := http.Get(px.url + "/v1/messages")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := "sforge proxy: failed to reach upstream https://" + dead + ": "
	if resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(string(body), want) || strings.Count(string(body), "\n") != 1 {
		t.Fatalf("status %d body %q; want 502 starting %q", resp.StatusCode, body, want)
	}
	if !strings.Contains(px.logs.String(), "failed to reach upstream") {
		t.Fatalf("no log:\n%s", px.logs)
	}
}

// TestAbsoluteURIStaysOnTarget: a request in absolute form (how a client
// talks to a forward proxy) still goes to the target, so the proxy cannot
// be used to reach anything else.
func TestAbsoluteURIStaysOnTarget(t *testing.T) {
	up := proxytest.NewUpstream(t, proxytest.Options{})
	px := startProxy(t, up, Config{Target: mustURL(t, up.URL())})
	conn, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET http://198.51.100.1:8080/steal?x=1 HTTP/1.1\r\nHost: 198.51.100.1:8080\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e proxytest.Echo
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	if want := fmt.Sprintf("%s:%d", proxytest.Host, up.Port); e.Host != want || e.Path != "/steal" {
		t.Fatalf("upstream saw Host %q path %q; want the target %s", e.Host, e.Path, want)
	}
}

func TestConnectRefused(t *testing.T) {
	up := proxytest.NewUpstream(t, proxytest.Options{})
	px := startProxy(t, up, Config{Target: mustURL(t, up.URL())})
	conn, err := net.Dial("tcp", strings.TrimPrefix(px.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "CONNECT 198.51.100.1:443 HTTP/1.1\r\nHost: 198.51.100.1:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("CONNECT got %d, want 405", resp.StatusCode)
	}
}

// TestLogLine: one line per request with client, method, path (without the
// query), status, bytes and duration.
func TestLogLine(t *testing.T) {
	up := proxytest.NewUpstream(t, proxytest.Options{})
	px := startProxy(t, up, Config{Target: mustURL(t, up.URL())})
	resp, err := http.Get(px.url + "/bytes?n=1234")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var line string
	waitFor(t, func() bool {
		for _, l := range strings.Split(px.logs.String(), "\n") {
			if strings.Contains(l, "msg=request") {
				line = l
				return true
			}
		}
		return false
	}, px.logs)
	for _, want := range []string{"client=127.0.0.1:", "method=GET", "path=/bytes ", "status=200", "bytes=1234", "duration="} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "n=1234") {
		t.Errorf("log line %q shows the query", line)
	}
}

// TestGracefulShutdown: once Serve's context is done, new connections are
// refused, a stream in flight runs to its end, and Serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	up := proxytest.NewUpstream(t, proxytest.Options{})
	px := startProxy(t, up, Config{Target: mustURL(t, up.URL())})
	resp, err := http.Get(px.url + "/sse?lockstep=1&n=4")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := proxytest.NextEvent(br); err != nil {
		t.Fatal(err)
	}
	px.cancel()
	waitFor(t, func() bool { return strings.Contains(px.logs.String(), "shutting down") }, px.logs)
	// The listener is closed: a new client is refused.
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(px.url, "http://"), time.Second); err == nil {
		c.Close()
		t.Fatal("proxy still accepts connections after shutdown began")
	}
	for i := 1; i < 4; i++ {
		up.Ack()
		ev, err := proxytest.NextEvent(br)
		if err != nil || ev.I != i {
			t.Fatalf("event %d during shutdown: %+v, %v", i, ev, err)
		}
	}
	select {
	case err := <-px.done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the stream ended")
	}
	px.done <- nil // for the cleanup
}

// TestShutdownTimeout: a stream that outlives ShutdownTimeout is cut and
// Serve says so.
func TestShutdownTimeout(t *testing.T) {
	up := proxytest.NewUpstream(t, proxytest.Options{})
	px := startProxy(t, up, Config{Target: mustURL(t, up.URL()), ShutdownTimeout: 200 * time.Millisecond})
	resp, err := http.Get(px.url + "/sse?lockstep=1&n=4")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := proxytest.NextEvent(bufio.NewReader(resp.Body)); err != nil {
		t.Fatal(err)
	}
	px.cancel()
	select {
	case err := <-px.done:
		if err == nil || !strings.Contains(err.Error(), "failed to finish in-flight requests within 200ms") {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	px.done <- nil
}

// TestStreamsOnKeptAliveConnections: streamed replies to large requests
// (an agent resends its whole conversation each turn), one after another on
// kept-alive connections, arrive whole, also when the upstream closes its
// connection after every third reply, as some servers do.
func TestStreamsOnKeptAliveConnections(t *testing.T) {
	var mu sync.Mutex
	conns := map[string]bool{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		mu.Lock()
		conns[r.RemoteAddr] = true
		mu.Unlock()
		i := r.URL.Query().Get("i")
		if strings.HasSuffix(i, "2") || strings.HasSuffix(i, "5") || strings.HasSuffix(i, "8") {
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for k := range 3 {
			fmt.Fprintf(w, "data: {\"i\":%s,\"part\":%d,\"got\":%d}\n\n", i, k, n)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(up.Close)
	px := startProxy(t, nil, Config{Target: mustURL(t, up.URL), RootCAs: x509.NewCertPool(), DialContext: (&net.Dialer{}).DialContext})
	body := strings.Repeat("x", 64<<10)
	const requests = 100
	for i := range requests {
		resp, err := http.Post(fmt.Sprintf("%s/v1beta/models/m:streamGenerateContent?alt=sse&i=%d", px.url, i), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("request %d: the stream was cut: %v after %q\nlogs:\n%s", i, err, got, px.logs)
		}
		want := fmt.Sprintf("data: {\"i\":%d,\"part\":2,\"got\":%d}\n\n", i, len(body))
		if !strings.HasSuffix(string(got), want) || strings.Count(string(got), "data: ") != 3 {
			t.Fatalf("request %d: got %q, want three events ending with %q", i, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) >= requests {
		t.Errorf("the proxy opened %d upstream connections for %d requests: it kept none alive", len(conns), requests)
	}
	if strings.Contains(px.logs.String(), "error") {
		t.Errorf("the proxy logged an error:\n%s", px.logs)
	}
}
