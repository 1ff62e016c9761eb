package iptables

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sforge-dev/netiso/policy"
)

// nsTables lists the iptables tables that exist in the current thread's
// network namespace, per backend and family. It tells which backend already
// holds rules there (Docker's embedded-DNS NAT, an earlier sforge chain)
// without starting a process: legacy tables from /proc, nft tables from one
// netlink dump. Call it only on a thread inside the namespace.
type nsTables map[Backend]map[policy.Family][]string

func readTables() (nsTables, error) {
	t := nsTables{Legacy: {}, NFT: {}}
	// /proc/thread-self/net, not /proc/net (= /proc/self/net): the latter
	// shows the namespace of the thread group leader, not of this thread.
	for f, file := range map[policy.Family]string{policy.IPv4: "ip_tables_names", policy.IPv6: "ip6_tables_names"} {
		names, err := readLines("/proc/thread-self/net/" + file)
		if err != nil {
			return nil, err
		}
		t[Legacy][f] = names
	}
	nft, err := nftTables()
	if err != nil {
		return nil, err
	}
	t[NFT] = nft
	return t, nil
}

// used reports whether backend b has any table in the namespace.
func (t nsTables) used(b Backend) bool {
	return len(t[b][policy.IPv4])+len(t[b][policy.IPv6]) > 0
}

// hasFilter reports whether backend b has a filter table for family f: our
// chains live there, so without one there is nothing of ours to remove.
func (t nsTables) hasFilter(b Backend, f policy.Family) bool {
	return slices.Contains(t[b][f], "filter")
}

// readLines reads a /proc list; a missing file means the kernel lacks that
// part of netfilter, so the list is empty.
func readLines(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", path, err)
	}
	return strings.Fields(string(data)), nil
}

// nftTables dumps the nf_tables tables of the ip and ip6 families (the ones
// iptables-nft uses; inet, arp, bridge and netdev tables are not iptables')
// through NETLINK_NETFILTER. A kernel without nf_tables has none.
func nftTables() (map[policy.Family][]string, error) {
	out := map[policy.Family][]string{}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		if errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT) {
			return out, nil
		}
		return nil, fmt.Errorf("failed to open a netfilter netlink socket: %w", err)
	}
	defer unix.Close(fd)
	// A dump is finite and answered at once; the timeout only guards
	// against a kernel that never answers.
	tv := unix.Timeval{Sec: 5}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("failed to set a netlink timeout: %w", err)
	}
	const seq = 1
	req := make([]byte, unix.NLMSG_HDRLEN+4)
	binary.NativeEndian.PutUint32(req[0:4], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:6], unix.NFNL_SUBSYS_NFTABLES<<8|unix.NFT_MSG_GETTABLE)
	binary.NativeEndian.PutUint16(req[6:8], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:12], seq)
	// nfgenmsg: family AF_UNSPEC (all), version, resource id.
	req[unix.NLMSG_HDRLEN] = unix.AF_UNSPEC
	req[unix.NLMSG_HDRLEN+1] = unix.NFNETLINK_V0
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("failed to ask netlink for nf_tables tables: %w", err)
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("failed to read nf_tables tables from netlink: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("failed to parse a netlink answer: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq {
				continue
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) < 4 {
					return nil, fmt.Errorf("short netlink error message")
				}
				errno := -int32(binary.NativeEndian.Uint32(m.Data[0:4]))
				if errno == 0 {
					return out, nil
				}
				// No nf_tables subsystem in this kernel: no tables.
				if e := unix.Errno(errno); e == unix.EOPNOTSUPP || e == unix.ENOENT || e == unix.EPROTONOSUPPORT {
					return out, nil
				}
				return nil, fmt.Errorf("failed to list nf_tables tables: %w", unix.Errno(errno))
			}
			if len(m.Data) < 4 {
				continue
			}
			var f policy.Family
			switch m.Data[0] {
			case unix.NFPROTO_IPV4:
				f = policy.IPv4
			case unix.NFPROTO_IPV6:
				f = policy.IPv6
			default:
				continue
			}
			if name, ok := stringAttr(m.Data[4:], unix.NFTA_TABLE_NAME); ok {
				out[f] = append(out[f], name)
			}
		}
	}
}

// stringAttr finds a NUL-terminated string attribute in netlink attributes.
func stringAttr(b []byte, typ uint16) (string, bool) {
	for len(b) >= unix.NLA_HDRLEN {
		l := int(binary.NativeEndian.Uint16(b[0:2]))
		t := binary.NativeEndian.Uint16(b[2:4]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < unix.NLA_HDRLEN || l > len(b) {
			return "", false
		}
		if t == typ {
			return strings.TrimRight(string(b[unix.NLA_HDRLEN:l]), "\x00"), true
		}
		next := (l + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1)
		if next > len(b) {
			return "", false
		}
		b = b[next:]
	}
	return "", false
}
