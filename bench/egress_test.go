package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/internal/testenv"
	"github.com/sforge-dev/netiso/proxy/proxytest"
)

// The egress benchmark's world: the client and the proxies in one network
// namespace ("near"), the upstream in another ("far") at egressBenchAddr,
// behind a veth pair. The upstream is not on an interface of the proxies'
// namespace, which the egress proxy would refuse as this host's.
var (
	egressBenchAddr     = netip.MustParseAddr("192.0.2.80")
	egressBenchLinkNear = netip.MustParsePrefix("198.18.9.1/30")
	egressBenchLinkFar  = netip.MustParsePrefix("198.18.9.2/30")
)

const egressBenchConnRuns = 400 // new connections per path

// BenchmarkEgress compares, in one run, a client reaching a TLS upstream
// directly, through `sforge proxy --egress` (CONNECT, the ClientHello's
// SNI checked, the name resolved at each connection) and through squid as
// a forward proxy with a dstdomain allowlist: the latency added to a
// request on a kept-alive connection and to one that opens a connection
// (CONNECT, TLS handshake), throughput of small requests and of large
// bodies, and the delay to the first server-sent event. Both proxies log
// each connection to a file.
func BenchmarkEgress(b *testing.B) {
	squid := testenv.RequireBinary(b, "squid")
	nsenter := testenv.RequireBinary(b, "nsenter")
	near, far := egressBenchWorld(b)
	var up *proxytest.Upstream
	if err := far.Do(func(ns.NetNS) error {
		up = proxytest.NewUpstream(b, proxytest.Options{Listen: net.JoinHostPort(egressBenchAddr.String(), "443")})
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	dial := func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		// Dial from the near namespace; the socket stays there.
		err = near.Do(func(ns.NetNS) error {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	upstreamDial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, port, _ := net.SplitHostPort(addr)
		return dial(ctx, network, net.JoinHostPort(egressBenchAddr.String(), port))
	}
	bin := proxyBenchBuildSforge(b, dir)
	sforgeAddr := egressBenchStartSforge(b, nsenter, bin, near, dir, dial)
	squidAddr := egressBenchStartSquid(b, nsenter, squid, near, dial)

	base := fmt.Sprintf("https://%s:%d", proxytest.Host, up.Port)
	transport := func(proxy string, keepAlive bool) *http.Transport {
		t := &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: up.CertPool()},
			DialContext:         upstreamDial,
			MaxIdleConnsPerHost: 64,
			DisableCompression:  true,
			DisableKeepAlives:   !keepAlive,
		}
		if proxy != "" {
			u, _ := url.Parse("http://" + proxy)
			t.Proxy, t.DialContext = http.ProxyURL(u), dial
		}
		return t
	}
	type path struct {
		kept, fresh proxyBenchPath
	}
	mk := func(name, proxy string) path {
		return path{
			proxyBenchPath{name, base, &http.Client{Transport: transport(proxy, true)}},
			proxyBenchPath{name, base, &http.Client{Transport: transport(proxy, false)}},
		}
	}
	paths := []path{mk("direct", ""), mk("sforge --egress", sforgeAddr), mk("squid", squidAddr)}
	body := bytes.Repeat([]byte("a"), proxyBenchBodySize)

	lat, conn := map[string][]time.Duration{}, map[string][]time.Duration{}
	for i := range proxyBenchWarmup + proxyBenchLatencyRuns {
		for _, p := range paths {
			d, err := proxyBenchRequest(p.kept, "/v1/messages", body)
			if err != nil {
				b.Fatalf("%s: %v", p.kept.name, err)
			}
			if i >= proxyBenchWarmup {
				lat[p.kept.name] = append(lat[p.kept.name], d)
			}
		}
	}
	for range egressBenchConnRuns {
		for _, p := range paths {
			d, err := proxyBenchRequest(p.fresh, "/v1/messages", body)
			if err != nil {
				b.Fatalf("%s, new connection: %v", p.fresh.name, err)
			}
			conn[p.fresh.name] = append(conn[p.fresh.name], d)
		}
	}

	smallN, smallT := map[string]int{}, map[string]time.Duration{}
	bigBytes, bigT := map[string]int64{}, map[string]time.Duration{}
	for r := range proxyBenchRounds {
		for k := range paths {
			p := paths[(r+k)%len(paths)].kept
			d, _, err := proxyBenchBatch(p, proxyBenchSmallPerRun, proxyBenchSmallConc, func() (int64, error) {
				_, err := proxyBenchRequest(p, "/v1/messages", body)
				return 0, err
			})
			if err != nil {
				b.Fatalf("%s small: %v", p.name, err)
			}
			smallN[p.name] += proxyBenchSmallPerRun
			smallT[p.name] += d
			d, n, err := proxyBenchBatch(p, proxyBenchBigPerRun, proxyBenchBigConc, func() (int64, error) {
				return proxyBenchDownload(p, proxyBenchBigSize)
			})
			if err != nil {
				b.Fatalf("%s big: %v", p.name, err)
			}
			bigBytes[p.name] += n
			bigT[p.name] += d
		}
	}

	first := map[string][]time.Duration{}
	for range proxyBenchSSERuns {
		for _, p := range paths {
			d, err := proxyBenchFirstEvent(p.kept)
			if err != nil {
				b.Fatalf("%s sse: %v", p.kept.name, err)
			}
			first[p.kept.name] = append(first[p.kept.name], d)
		}
	}
	for _, p := range paths {
		p.kept.client.CloseIdleConnections()
	}

	var report strings.Builder
	fmt.Fprintf(&report, "\n%d sequential POSTs of %d B per path on a kept-alive connection (after %d warm-up), %d on a new connection each, throughput in %d rotated rounds, %d streams per path; GOMAXPROCS=%d\n\n",
		proxyBenchLatencyRuns, proxyBenchBodySize, proxyBenchWarmup, egressBenchConnRuns, proxyBenchRounds, proxyBenchSSERuns, runtime.GOMAXPROCS(0))
	fmt.Fprintf(&report, "| path | kept-alive p50 | p99 | added p50 | added p99 | new connection p50 | p99 | added p50 | added p99 | small req/s (c=%d) | %d MiB bodies MiB/s (c=%d) | first event p50 | first event p99 |\n",
		proxyBenchSmallConc, proxyBenchBigSize>>20, proxyBenchBigConc)
	report.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	d50, d99 := proxyBenchPct(lat["direct"], 50), proxyBenchPct(lat["direct"], 99)
	c50, c99 := proxyBenchPct(conn["direct"], 50), proxyBenchPct(conn["direct"], 99)
	for _, p := range paths {
		n := p.kept.name
		p50, p99 := proxyBenchPct(lat[n], 50), proxyBenchPct(lat[n], 99)
		n50, n99 := proxyBenchPct(conn[n], 50), proxyBenchPct(conn[n], 99)
		rps := float64(smallN[n]) / smallT[n].Seconds()
		mibps := float64(bigBytes[n]) / (1 << 20) / bigT[n].Seconds()
		f50, f99 := proxyBenchPct(first[n], 50), proxyBenchPct(first[n], 99)
		fmt.Fprintf(&report, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %.0f | %s | %s |\n", n,
			proxyBenchUS(p50), proxyBenchUS(p99), proxyBenchUS(p50-d50), proxyBenchUS(p99-d99),
			proxyBenchUS(n50), proxyBenchUS(n99), proxyBenchUS(n50-c50), proxyBenchUS(n99-c99),
			rps, mibps, proxyBenchUS(f50), proxyBenchUS(f99))
		metric := strings.ReplaceAll(strings.ReplaceAll(n, " --", "-"), " ", "-")
		b.ReportMetric(float64(p50.Microseconds()), metric+"-p50-µs")
		b.ReportMetric(float64(n50.Microseconds()), metric+"-newconn-p50-µs")
	}
	b.Log(report.String())
}

// egressBenchWorld makes the two namespaces and the veth pair between them.
func egressBenchWorld(b *testing.B) (near, far ns.NetNS) {
	near, far = testenv.NewNetNS(b), testenv.NewNetNS(b)
	ipnet := func(p netip.Prefix) *net.IPNet {
		return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
	}
	host := &net.IPNet{IP: egressBenchAddr.AsSlice(), Mask: net.CIDRMask(32, 32)}
	err := near.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "egn"}, PeerName: "egf", PeerNamespace: netlink.NsFd(int(far.Fd()))}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		l, err := netlink.LinkByName("egn")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet(egressBenchLinkNear)}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		return netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: host, Gw: egressBenchLinkFar.Addr().AsSlice()})
	})
	if err != nil {
		b.Fatalf("failed to set up the near namespace: %v", err)
	}
	err = far.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName("egf")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: ipnet(egressBenchLinkFar)}); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: egressBenchLinkNear.Addr().AsSlice()}); err != nil {
			return err
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.AddrAdd(lo, &netlink.Addr{IPNet: host, Flags: unix.IFA_F_NODAD})
	})
	if err != nil {
		b.Fatalf("failed to set up the far namespace: %v", err)
	}
	return near, far
}

// egressBenchWait waits for addr to accept connections in the near
// namespace.
func egressBenchWait(b *testing.B, dial func(context.Context, string, string) (net.Conn, error), addr string, exited <-chan error, logFile string) {
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

// egressBenchStartSforge starts `sforge proxy --egress` in the near
// namespace, as its own process, logging each decision to a file.
func egressBenchStartSforge(b *testing.B, nsenter, bin string, near ns.NetNS, dir string, dial func(context.Context, string, string) (net.Conn, error)) string {
	port := proxyBenchFreePort(b)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(nsenter, "--net="+near.Path(), "--", bin, "proxy", "--egress", "--listen", "127.0.0.1", "--port", strconv.Itoa(port),
		"--allow-domain", proxytest.Host, "--resolve", proxytest.Host+"="+egressBenchAddr.String(), "--allow-from", "127.0.0.0/8")
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	logFile := filepath.Join(dir, "sforge-egress.log")
	done := proxyBenchRun(b, cmd, logFile, syscall.SIGTERM)
	egressBenchWait(b, dial, addr, done, logFile)
	return addr
}

// egressBenchStartSquid starts Debian's squid in the near namespace as a
// forward proxy that lets CONNECT through to the upstream's name only
// (acl dstdomain), resolved from a hosts file, logging each request.
func egressBenchStartSquid(b *testing.B, nsenter, squid string, near ns.NetNS, dial func(context.Context, string, string) (net.Conn, error)) string {
	dir, err := os.MkdirTemp("", "sforge-squid-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	effectiveUser := ""
	if os.Geteuid() == 0 {
		// Started as root, squid drops to cache_effective_user, which
		// must be able to write its logs here.
		u, err := user.Lookup("proxy")
		if err != nil {
			b.Fatalf("squid runs as root only with an unprivileged user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			b.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		effectiveUser = "cache_effective_user proxy\n"
	}
	port := proxyBenchFreePort(b)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte(egressBenchAddr.String()+" "+proxytest.Host+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	conf := filepath.Join(dir, "squid.conf")
	cfg := fmt.Sprintf(`http_port %[1]s
pid_filename %[2]s/squid.pid
cache_log %[2]s/cache.log
access_log stdio:%[2]s/access.log
coredump_dir %[2]s
hosts_file %[3]s
dns_nameservers 127.0.0.1
visible_hostname sforge-bench
pinger_enable off
cache deny all
cache_mem 8 MB
shutdown_lifetime 0 seconds
acl from_loopback src 127.0.0.0/8
acl allowed dstdomain %[4]s
acl SSL_ports port 443
acl CONNECT method CONNECT
http_access allow CONNECT from_loopback allowed SSL_ports
http_access deny all
%[5]s`, addr, dir, hosts, proxytest.Host, effectiveUser)
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		b.Fatal(err)
	}
	service := fmt.Sprintf("sfbx%d", time.Now().UnixNano()%1e9)
	cmd := exec.Command(nsenter, "--net="+near.Path(), "--", squid, "-N", "-n", service, "-f", conf)
	cmd.Dir = dir
	logFile := filepath.Join(dir, "stderr.log")
	done := proxyBenchRun(b, cmd, logFile, syscall.SIGTERM)
	egressBenchWait(b, dial, addr, done, filepath.Join(dir, "cache.log"))
	return addr
}
