// Package testnet builds, for one test, the network a sandboxed container
// sees: a container namespace linked by a veth pair to a "judge" namespace
// that serves TCP and UDP on fixed TEST-NET addresses and also answers for
// an "internet" address routed through it, over IPv4 and IPv6. Everything
// lives in namespaces the test creates, so no packet leaves the machine,
// and the fixed addresses cannot collide between tests running at once.
package testnet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/internal/testenv"
)

// The topology's addresses and ports.
const (
	JudgeIP      = "198.51.100.10"
	ContainerIP  = "198.51.100.2"
	InternetIP   = "203.0.113.10" // routed via the judge namespace
	JudgeIP6     = "2001:db8::10"
	ContainerIP6 = "2001:db8::2"
	// EmbeddedDNS is Docker's embedded resolver address; ServeEmbeddedDNS
	// answers on it inside the container namespace.
	EmbeddedDNS = "127.0.0.11"

	JudgePort = 8080 // the port tests allow
	OtherPort = 9090 // a second TCP port on the same host
	DNSPort   = 53   // UDP and TCP echo
	UDPPort   = 5353 // a second UDP echo port
)

// Addr joins a host and a port ("[2001:db8::10]:8080" for IPv6).
func Addr(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// Topology is one test's network.
type Topology struct {
	// Container is the namespace containers join (spec path
	// Container.Path()); it outlives them.
	Container ns.NetNS
	// Judge serves on JudgeIP, InternetIP and JudgeIP6.
	Judge ns.NetNS
}

// New builds the topology and starts the judge's servers; everything is
// removed when the test ends. It requires root.
func New(t testing.TB) *Topology {
	t.Helper()
	tp := &Topology{Container: testenv.NewNetNS(t), Judge: testenv.NewNetNS(t)}
	suffix := randomSuffix(t)
	cName, jName := "sfc"+suffix, "sfj"+suffix // at most 15 characters
	err := tp.Container.Do(func(ns.NetNS) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: cName}, PeerName: jName, PeerNamespace: netlink.NsFd(int(tp.Judge.Fd()))}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("failed to create veth %s: %w", cName, err)
		}
		link, err := configure(cName, ContainerIP+"/24", ContainerIP6+"/64")
		if err != nil {
			return err
		}
		gw := net.ParseIP(JudgeIP)
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: gw}); err != nil {
			return fmt.Errorf("failed to add the default route: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = tp.Judge.Do(func(ns.NetNS) error {
		if _, err := configure(jName, JudgeIP+"/24", JudgeIP6+"/64"); err != nil {
			return err
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		inet, _ := netlink.ParseAddr(InternetIP + "/32")
		if err := netlink.AddrAdd(lo, inet); err != nil {
			return fmt.Errorf("failed to add %s: %w", InternetIP, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Dual-stack listeners on all addresses: one server answers on the
	// judge's IPv4, IPv6 and "internet" addresses alike, so a refusal can
	// only come from the container's rules.
	for _, port := range []int{JudgePort, OtherPort, DNSPort} {
		serveTCP(t, tp.Judge, Addr("::", port))
	}
	for _, port := range []int{DNSPort, UDPPort} {
		serveUDP(t, tp.Judge, Addr("::", port))
	}
	return tp
}

// ServeEmbeddedDNS starts UDP and TCP echo servers on 127.0.0.11:53 inside
// the container namespace, standing in for Docker's embedded resolver:
// without a listener, a refused packet and an unanswered one look alike.
func (tp *Topology) ServeEmbeddedDNS(t testing.TB) {
	t.Helper()
	serveTCP(t, tp.Container, Addr(EmbeddedDNS, DNSPort))
	serveUDP(t, tp.Container, Addr(EmbeddedDNS, DNSPort))
}

func configure(name string, addrs ...string) (netlink.Link, error) {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("failed to find %s: %w", name, err)
	}
	for _, a := range addrs {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			return nil, err
		}
		if addr.IP.To4() == nil {
			addr.Flags = unix.IFA_F_NODAD // usable at once, no duplicate detection wait
		}
		if err := netlink.AddrAdd(link, addr); err != nil {
			return nil, fmt.Errorf("failed to add %s to %s: %w", a, name, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("failed to bring %s up: %w", name, err)
	}
	return link, nil
}

// serveTCP accepts connections in n, writes a line and closes them.
// Sockets keep the namespace they were created in, so only the bind needs
// to run inside it; the accept loop is an ordinary goroutine.
func serveTCP(t testing.TB, n ns.NetNS, addr string) {
	t.Helper()
	var ln net.Listener
	if err := n.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("failed to listen on tcp %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			_, _ = c.Write([]byte("sforge-test\n"))
			_ = c.Close()
		}
	}()
}

// serveUDP echoes every datagram in n.
func serveUDP(t testing.TB, n ns.NetNS, addr string) {
	t.Helper()
	var pc net.PacketConn
	if err := n.Do(func(ns.NetNS) error {
		var err error
		pc, err = net.ListenPacket("udp", addr)
		return err
	}); err != nil {
		t.Fatalf("failed to listen on udp %s: %v", addr, err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			k, from, err := pc.ReadFrom(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			_, _ = pc.WriteTo(buf[:k], from)
		}
	}()
}

func randomSuffix(t testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
