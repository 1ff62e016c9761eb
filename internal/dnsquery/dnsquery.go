// Package dnsquery sends the single DNS queries that tests and the probe
// use to see what a resolver answers.
package dnsquery

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Labels splits a dotted name into its labels.
func Labels(name string) [][]byte {
	var out [][]byte
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		out = append(out, []byte(l))
	}
	return out
}

// Ask sends one A query, with recursion desired, for the name made of
// labels (any bytes: a probe sends binary ones) to target over network
// (udp4 or tcp4) and returns the reply's code and its answers' addresses
// (an answer of another type counts as an invalid address).
func Ask(network, target string, name [][]byte, timeout time.Duration) (dnsmessage.RCode, []netip.Addr, error) {
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
