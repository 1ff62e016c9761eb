package main

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The container's own resolver (sforge's, on a loopback address that
// /etc/resolv.conf names): it must answer the names /etc/hosts pins, with
// the pinned address, and refuse every other name — a unique name under a
// zone an attacker could serve (the DNS tunnel), a name with binary
// labels, a long one — over UDP and TCP, so that no query is answered
// from elsewhere.

// ownResolvers are the loopback nameservers of resolv.conf other than
// Docker's embedded resolver and the allowed ones.
func ownResolvers(resolvConf io.Reader, allowed []string) []netip.Addr {
	var out []netip.Addr
	sc := bufio.NewScanner(resolvConf)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		a, err := netip.ParseAddr(f[1])
		if err != nil || !a.Is4() || !a.IsLoopback() || a == netip.AddrFrom4([4]byte{127, 0, 0, 11}) ||
			slices.Contains(allowed, a.String()) || slices.Contains(out, a) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// pinnedHosts are the IPv4 names of /etc/hosts other than loopback and the
// container's own name.
func pinnedHosts(hosts io.Reader, hostname string) map[string]netip.Addr {
	out := map[string]netip.Addr{}
	sc := bufio.NewScanner(hosts)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil || !a.Is4() || a.IsLoopback() {
			continue
		}
		for _, name := range f[1:] {
			name = strings.ToLower(name)
			if _, dup := out[name]; !dup && name != strings.ToLower(hostname) {
				out[name] = a
			}
		}
	}
	return out
}

// resolverAttempts are the checks of each own resolver.
func resolverAttempts(servers []netip.Addr, pinned map[string]netip.Addr) []attempt {
	var b [4]byte
	_, _ = rand.Read(b[:])
	unique := "sforge-probe-" + hex.EncodeToString(b[:]) + ".tunnel.sforge-probe.invalid"
	binaryLabel := []byte{0x00, 0x01, 0x7f, 0x80, 0xff, ' ', 'x'}
	long := strings.Repeat(hex.EncodeToString(b[:]), 8)[:63]
	longName := long + "." + long + "." + long + ".sforge-probe.invalid"
	var out []attempt
	for _, s := range servers {
		t := netip.AddrPortFrom(s, 53).String()
		for _, network := range []string{"udp4", "tcp4"} {
			proto := network[:3]
			out = append(out,
				attempt{"resolver-tunnel-" + proto, t + " " + unique, expectRefused, func(d time.Duration) error {
					return refusedName(network, t, labels(unique), d)
				}},
				attempt{"resolver-long-" + proto, t + " " + longName, expectRefused, func(d time.Duration) error {
					return refusedName(network, t, labels(longName), d)
				}})
		}
		out = append(out, attempt{"resolver-binary-udp", t + " " + fmt.Sprintf("%q", binaryLabel) + ".sforge-probe.invalid", expectRefused, func(d time.Duration) error {
			return refusedName("udp4", t, append([][]byte{binaryLabel}, labels("sforge-probe.invalid")...), d)
		}})
		for _, name := range slices.Sorted(maps.Keys(pinned)) {
			want := pinned[name]
			out = append(out, attempt{"resolver-pinned", t + " " + name + " " + want.String(), expectReachable, func(d time.Duration) error {
				rc, addrs, err := askResolver("udp4", t, labels(name), d)
				if err != nil {
					return err
				}
				if rc != dnsmessage.RCodeSuccess || !slices.Contains(addrs, want) {
					return fmt.Errorf("answered %s with %v, want %s", rc, addrs, want)
				}
				return nil
			}})
		}
	}
	return out
}

func labels(name string) [][]byte {
	var out [][]byte
	for _, l := range strings.Split(name, ".") {
		out = append(out, []byte(l))
	}
	return out
}

// refusedName is nil (a leak) when the server answers the name with
// anything but REFUSED and no records.
func refusedName(network, target string, name [][]byte, timeout time.Duration) error {
	rc, addrs, err := askResolver(network, target, name, timeout)
	if err != nil {
		return err
	}
	if rc == dnsmessage.RCodeRefused && len(addrs) == 0 {
		return errors.New("REFUSED")
	}
	return nil
}

// askResolver sends one A query for name's labels and returns the reply's
// code and addresses.
func askResolver(network, target string, name [][]byte, timeout time.Duration) (dnsmessage.RCode, []netip.Addr, error) {
	c, err := net.DialTimeout(network, target, timeout)
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, nil, err
	}
	var idb [2]byte
	_, _ = rand.Read(idb[:])
	id := binary.BigEndian.Uint16(idb[:])
	q := binary.BigEndian.AppendUint16(nil, id)
	q = append(q, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD, one question
	for _, l := range name {
		q = append(q, byte(len(l)))
		q = append(q, l...)
	}
	q = append(q, 0, 0, 1, 0, 1) // root, type A, class IN
	buf := make([]byte, 4096)
	var reply []byte
	if strings.HasPrefix(network, "tcp") {
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
			return 0, nil, err
		}
		if _, err := io.ReadFull(c, buf[:2]); err != nil {
			return 0, nil, err
		}
		n := int(binary.BigEndian.Uint16(buf))
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return 0, nil, err
		}
		reply = buf[:n]
	} else {
		if _, err := c.Write(q); err != nil {
			return 0, nil, err
		}
		n, err := c.Read(buf)
		if err != nil {
			return 0, nil, err
		}
		reply = buf[:n]
	}
	var p dnsmessage.Parser
	h, err := p.Start(reply)
	if err != nil || h.ID != id || !h.Response {
		return 0, nil, fmt.Errorf("not a DNS answer: %s", hex.EncodeToString(reply[:min(len(reply), 16)]))
	}
	if err := p.SkipAllQuestions(); err != nil {
		return 0, nil, err
	}
	var addrs []netip.Addr
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return h.RCode, addrs, err
		}
		if rh.Type != dnsmessage.TypeA {
			if err := p.SkipAnswer(); err != nil {
				return h.RCode, addrs, err
			}
			addrs = append(addrs, netip.Addr{}) // a record all the same
			continue
		}
		a, err := p.AResource()
		if err != nil {
			return h.RCode, addrs, err
		}
		addrs = append(addrs, netip.AddrFrom4(a.A))
	}
	return h.RCode, addrs, nil
}

// ownResolverAttempts reads this container's resolv.conf and hosts.
func ownResolverAttempts(cfg *MatrixConfig) []attempt {
	rc, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	defer rc.Close()
	servers := ownResolvers(rc, cfg.Resolvers)
	if len(servers) == 0 {
		return nil
	}
	pinned := map[string]netip.Addr{}
	if h, err := os.Open("/etc/hosts"); err == nil {
		hostname, _ := os.Hostname()
		pinned = pinnedHosts(h, hostname)
		h.Close()
	}
	var out []attempt
	for _, a := range resolverAttempts(servers, pinned) {
		if !slices.Contains(cfg.Skip, a.check) {
			out = append(out, a)
		}
	}
	return out
}
