package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sforge-dev/netiso/policy"
)

// clientHello is the first flight of a real crypto/tls client for name.
func clientHello(f *testing.F, name string, ech []byte) []byte {
	a, b := net.Pipe()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: name, InsecureSkipVerify: true, EncryptedClientHelloConfigList: ech})
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_ = c.Handshake()
		a.Close()
	}()
	_ = b.SetDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 64<<10)
	n, _ := b.Read(buf)
	b.Close()
	return buf[:n]
}

// FuzzReadHello: reading a ClientHello from any bytes never panics, never
// returns more than it read, and a hello it accepts names a server no
// longer than a DNS name.
func FuzzReadHello(f *testing.F) {
	f.Add(clientHello(f, "api.example.com", nil))
	f.Add(clientHello(f, "", nil))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		h, replay, err := ReadHello(ctx, bytes.NewReader(in))
		if !bytes.HasPrefix(in, replay) {
			t.Fatalf("replay %x is not a prefix of the input", replay)
		}
		if err == nil && len(h.ServerName) > 255 {
			t.Fatalf("server name of %d bytes", len(h.ServerName))
		}
	})
}

// FuzzSplitAuthority: a CONNECT target or Host never panics the parser;
// an accepted one is a valid name or an IP address and a non-zero port,
// and round-trips.
func FuzzSplitAuthority(f *testing.F) {
	for _, s := range []string{"api.example.com:443", "API.example.com.:443", "[::1]:443", "10.0.0.1:80", "a", "a:", ":443", "a:0", "a:99999", "[::1]", "a:b:c", "x y:1", "[fe80::1%eth0]:443"} {
		f.Add(s, uint16(0))
		f.Add(s, uint16(80))
	}
	f.Fuzz(func(t *testing.T, authority string, def uint16) {
		host, port, err := SplitAuthority(authority, def)
		if err != nil {
			return
		}
		if port == 0 {
			t.Fatalf("%q: port 0", authority)
		}
		if _, perr := policy.ParseDomainPattern("h", host); perr != nil && !strings.Contains(perr.Error(), "an IP address") {
			t.Fatalf("%q: accepted host %q is neither a name nor an address: %v", authority, host, perr)
		}
		h2, p2, err := SplitAuthority(net.JoinHostPort(host, strconv.Itoa(int(port))), 0)
		if err != nil || h2 != host || p2 != port {
			t.Fatalf("%q -> %s %d does not round-trip: %s %d %v", authority, host, port, h2, p2, err)
		}
	})
}
