package testcluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/sforge-dev/netiso/internal/dnsquery"
	"github.com/sforge-dev/netiso/internal/testk8s"
)

// The cluster's resolver is Debian's dnsmasq on ClusterDNS in the judge
// namespace, a recursive resolver as a cluster has one: it forwards
// TunnelZone to that zone's authoritative server on TunnelDNS (the test's,
// which records every name it is asked) and refuses every other name (it
// has no upstream). A unique name under TunnelZone reaching that server is
// the DNS tunnel: it exists for a Pod allowed to query the cluster's
// resolver, and must not for an isolated one.
const (
	TunnelZone = "tunnel.sforge.test"
	// TunnelDNS is the zone's server; no route leads there from a Pod.
	TunnelDNS = "192.0.2.53"
	// TunnelAnswer is its answer to every A query under the zone.
	TunnelAnswer = "192.0.2.1"
)

// zoneServer is TunnelZone's authoritative server.
type zoneServer struct {
	mu    sync.Mutex
	names []string
}

// TunnelNames are the names under TunnelZone its server was asked since
// the last ResetTunnel, lowercased, without the final dot, in order.
func (j *Judge) TunnelNames() []string {
	j.zone.mu.Lock()
	defer j.zone.mu.Unlock()
	return slices.Clone(j.zone.names)
}

// ResetTunnel forgets the names asked so far.
func (j *Judge) ResetTunnel() {
	j.zone.mu.Lock()
	defer j.zone.mu.Unlock()
	j.zone.names = nil
}

// answer builds the reply to query: the A record for a name under the
// zone (recorded), REFUSED for any other.
func (z *zoneServer) answer(query []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	name := strings.ToLower(strings.TrimSuffix(q.Name.String(), "."))
	reply := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	under := name == TunnelZone || strings.HasSuffix(name, "."+TunnelZone)
	if under {
		z.mu.Lock()
		if len(z.names) < 10000 {
			z.names = append(z.names, name)
		}
		z.mu.Unlock()
	} else {
		reply.RCode = dnsmessage.RCodeRefused
	}
	b := dnsmessage.NewBuilder(nil, reply)
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(q)
	if under && q.Type == dnsmessage.TypeA {
		_ = b.StartAnswers()
		_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 0},
			dnsmessage.AResource{A: netip.MustParseAddr(TunnelAnswer).As4()})
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// serve runs the zone's server on TunnelDNS:53, UDP and TCP, in the judge
// namespace, until the test ends.
func (z *zoneServer) serve(t testing.TB, n ns.NetNS) {
	t.Helper()
	var udp net.PacketConn
	var tcp net.Listener
	err := n.Do(func(ns.NetNS) error {
		var err error
		if udp, err = net.ListenPacket("udp4", TunnelDNS+":53"); err != nil {
			return err
		}
		tcp, err = net.Listen("tcp4", TunnelDNS+":53")
		return err
	})
	if err != nil {
		t.Fatalf("testcluster: the test zone's server: %v", err)
	}
	t.Cleanup(func() { udp.Close(); tcp.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := udp.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := z.answer(buf[:n]); out != nil {
				_, _ = udp.WriteTo(out, from)
			}
		}
	}()
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				for {
					var l [2]byte
					if _, err := io.ReadFull(c, l[:]); err != nil {
						return
					}
					q := make([]byte, binary.BigEndian.Uint16(l[:]))
					if _, err := io.ReadFull(c, q); err != nil {
						return
					}
					out := z.answer(q)
					if out == nil {
						return
					}
					if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// startResolver starts dnsmasq on ClusterDNS in the judge namespace and
// waits until it answers.
func (c *Cluster) startResolver(t testing.TB) error {
	bin, err := exec.LookPath("dnsmasq")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, "logs"), 0o755); err != nil {
		return err
	}
	p, err := testk8s.StartProcessIn("dnsmasq", filepath.Join(c.Dir, "logs", "dnsmasq.log"), c.Judge.Path, bin,
		"--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--no-poll",
		"--bind-interfaces", "--listen-address="+ClusterDNS, "--port=53", "--cache-size=0",
		"--server=/"+TunnelZone+"/"+TunnelDNS, "--pid-file="+filepath.Join(c.Dir, "dnsmasq.pid"),
		"--log-queries", "--log-facility=-")
	if err != nil {
		return err
	}
	c.recordProc(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		rc, err := c.Judge.Ask("udp4", ClusterDNS, "ready.sforge.invalid")
		if err == nil && rc == dnsmessage.RCodeRefused {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dnsmasq never answered on %s:53 (last: %v %v); see %s", ClusterDNS, rc, err, p.LogPath)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Ask sends one A query for name to server:53 from the judge namespace and
// returns the reply's code.
func (j *Judge) Ask(network, server, name string) (dnsmessage.RCode, error) {
	var rc dnsmessage.RCode
	err := j.NetNS.Do(func(ns.NetNS) error {
		var err error
		rc, _, err = dnsquery.Ask(network, net.JoinHostPort(server, "53"), dnsquery.Labels(name), 2*time.Second)
		return err
	})
	return rc, err
}
