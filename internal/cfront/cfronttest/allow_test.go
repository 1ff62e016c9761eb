//go:build cgo

package cfronttest

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/policy"
)

// decodeCases are values for cfront_allow_decode with what policy.Decode
// says of them (ok). Every one is checked against the Go as well: the
// expectation only guards the table against testing something else than
// it says.
var decodeCases = []struct {
	in string
	ok bool
}{
	// policy/annotation_test.go, TestDecodeCanonical.
	{"v1", true},
	{"v1;tcp:10.0.0.12:8080", true},
	{"v1;tcp:10.0.0.12/32:8080", true},
	{"v1;else:reject", true},
	{"v1;else:drop", true},
	{"v1;dns:10.96.0.10;udp:10.0.0.5:4000;tcp:104.18.0.0/16:443;tcp:10.0.0.12:8080;else:drop", true},
	{"v1;tcp:10.0.0.0/8:443;tcp:10.0.0.0/16:443;tcp:10.0.0.0/8:80", true},
	{"v1;dns:127.0.0.11;dns:10.0.0.2", true},
	{"v1;tcp:0.0.0.0/0:443", true},

	// The order: protocol name, then numeric address (not text), prefix
	// length, port; resolvers by numeric address.
	{"v1;udp:1.1.1.1:1;tcp:2.2.2.2:1;tcp:1.1.1.1:2;tcp:1.1.1.1/32:1", true},
	{"v1;tcp:100.0.0.1:80;tcp:9.0.0.1:80;tcp:10.0.0.1:80;tcp:10.0.0.1:8080;tcp:10.0.0.1:443", true},
	{"v1;dns:200.1.1.1;dns:10.0.0.1;dns:9.9.9.9;dns:0.0.0.0;dns:255.255.255.255", true},
	{"v1;tcp:10.0.0.0/8:80;tcp:10.0.0.0:80;tcp:10.0.0.0/24:80;tcp:10.0.0.0/7:80;tcp:0.0.0.0/0:80", true},
	{"v1;tcp:128.0.0.0/1:1;tcp:0.0.0.0/1:1;tcp:255.255.255.254/31:65535", true},
	// The same address or port under another kind is no duplicate.
	{"v1;tcp:1.2.3.4:53;udp:1.2.3.4:53;dns:1.2.3.4", true},
	{"v1;tcp:10.0.0.0/8:80;tcp:10.0.0.0/9:80;tcp:10.0.0.0:80", true},
	{"v1;else:drop;tcp:1.2.3.4:80", true},
	{"v1;udp:255.255.255.255:65535;tcp:0.0.0.0:1", true},
	{"v1;tcp:0.0.0.0/0:1;tcp:1.2.3.0/24:9", true},

	// policy/annotation_test.go, TestDecodeErrors.
	{"", false},
	{"v2;tcp:1.2.3.4:80", false},
	{"tcp:1.2.3.4:80", false},
	{"V1", false},
	{"v1;", false},
	{"v1;tcp:1.2.3.4:80;", false},
	{"v1;;tcp:1.2.3.4:80", false},
	{"v1;tcp", false},
	{"v1;icmp:1.2.3.4:0", false},
	{"v1;TCP:1.2.3.4:80", false},
	{"v1;tcp:1.2.3.4", false},
	{"v1;tcp:1.2.3:80", false},
	{"v1;tcp:example.com:80", false},
	{"v1;tcp:10.0.0.1/8:80", false},
	{"v1;tcp:10.0.0.0/33:80", false},
	{"v1;tcp:1.2.3.4:0", false},
	{"v1;tcp:1.2.3.4:65536", false},
	{"v1;tcp:1.2.3.4:080", false},
	{"v1;tcp:1.2.3.4:+80", false},
	{"v1;tcp:1.2.3.4:80:90", false},
	{"v1;tcp:::1:80", false},
	{"v1;tcp:::ffff:1.2.3.4:80", false},
	{"v1;udp:1.2.3.4: 53", false},
	{"v1;dns:2001:db8::1", false},
	{"v1;dns:", false},
	{"v1;else:allow", false},
	{"v1;else:drop;else:reject", false},
	{"v1;tcp:1.2.3.4:80;tcp:1.2.3.4:80", false},
	{"v1;tcp:1.2.3.4:80;tcp:1.2.3.4/32:80", false},
	{"v1;dns:1.1.1.1;dns:1.1.1.1", false},
	{"v1; tcp:1.2.3.4:80", false},

	// Addresses: leading zeros, range, length, empty fields, other bases.
	{"v1;tcp:01.2.3.4:80", false},
	{"v1;tcp:1.2.3.04:80", false},
	{"v1;tcp:1.2.3.00:80", false},
	{"v1;tcp:0.0.0.0:80", true},
	{"v1;tcp:1.2.3.0004:80", false},
	{"v1;tcp:256.1.1.1:80", false},
	{"v1;tcp:1.2.3.2555:80", false},
	{"v1;tcp:1.2.3.4.5:80", false},
	{"v1;tcp:1.2.3.:80", false},
	{"v1;tcp:.1.2.3:80", false},
	{"v1;tcp:1..2.3:80", false},
	{"v1;tcp:1.2.3..4:80", false},
	{"v1;tcp:....:80", false},
	{"v1;tcp::80", false},
	{"v1;tcp:0x01.2.3.4:80", false},
	{"v1;tcp:16909060:80", false},
	{"v1;dns:0x01.2.3.4", false},
	{"v1;dns:1.2.3", false},
	{"v1;dns:1.2.3.4.", false},
	{"v1;dns:001.2.3.4", false},
	{"v1;dns:1.2.3.4/32", false},
	{"v1;dns:1.2.3.4:53", false},
	{"v1;dns: 1.2.3.4", false},
	{"v1;dns:1.2.3.4 ", false},
	// IPv6 and IPv4-in-IPv6 forms, zones.
	{"v1;dns:::ffff:1.2.3.4", false},
	{"v1;dns:::ffff:102:304", false},
	{"v1;dns:::1.2.3.4", false},
	{"v1;dns:[::1]", false},
	{"v1;tcp:[::ffff:1.2.3.4]:80", false},
	{"v1;tcp:::ffff:1.2.3.4/128:80", false},
	{"v1;tcp:1.2.3.4%eth0:80", false},
	{"v1;tcp:1.2.3.0%eth0/24:80", false},
	{"v1;tcp:1.2.3.0/24%eth0:80", false},
	{"v1;dns:1.2.3.4%eth0", false},
	{"v1;dns:%eth0", false},
	{"v1;dns:fe80::1%eth0", false},
	// Prefix lengths.
	{"v1;tcp:1.2.3.4/032:80", false},
	{"v1;tcp:1.2.3.4/33:80", false},
	{"v1;tcp:1.2.3.0/024:80", false},
	{"v1;tcp:0.0.0.0/00:80", false},
	{"v1;tcp:0.0.0.0/0:80", true},
	{"v1;tcp:1.2.3.4/32:80", true},
	{"v1;tcp:1.2.3.4/+32:80", false},
	{"v1;tcp:1.2.3.4/-0:80", false},
	{"v1;tcp:0.0.0.0/-0:80", false},
	{"v1;tcp:0.0.0.0/+0:80", false},
	{"v1;tcp:1.2.3.4/3_2:80", false},
	{"v1;tcp:1.2.3.0/0x18:80", false},
	{"v1;tcp:1.2.3.4/ 32:80", false},
	{"v1;tcp:1.2.3.4/32 :80", false},
	{"v1;tcp:1.2.3.4/:80", false},
	{"v1;tcp:/8:80", false},
	{"v1;tcp:/:80", false},
	{"v1;tcp:1.2.3.4//32:80", false},
	{"v1;tcp:1.2.3.4/32/32:80", false},
	{"v1;tcp:1.2.3.4/99999999999999999999999:80", false},
	{"v1;tcp:1.2.3.4/4294967328:80", false},
	// Host bits.
	{"v1;tcp:10.0.0.0/5:80", false},
	{"v1;tcp:10.0.0.0/7:80", true},
	{"v1;tcp:0.0.0.1/0:80", false},
	{"v1;tcp:1.2.3.4/31:80", true},
	{"v1;tcp:1.2.3.4/30:80", true},
	{"v1;tcp:1.2.3.5/31:80", false},
	{"v1;tcp:1.2.3.6/30:80", false},
	{"v1;tcp:1.2.3.4/29:80", false},
	{"v1;tcp:1.2.3.128/25:80", true},
	{"v1;tcp:1.2.3.129/25:80", false},
	// Ports.
	{"v1;tcp:1.2.3.4:65535", true},
	{"v1;tcp:1.2.3.4:1", true},
	{"v1;tcp:1.2.3.4:00", false},
	{"v1;tcp:1.2.3.4:-1", false},
	{"v1;tcp:1.2.3.4:8_0", false},
	{"v1;tcp:1.2.3.4:0x50", false},
	{"v1;tcp:1.2.3.4:80 ", false},
	{"v1;tcp:1.2.3.4:", false},
	{"v1;tcp:1.2.3.4:99999999999999999999999", false},
	{"v1;tcp:1.2.3.4:4294967376", false},
	{"v1;tcp:1.2.3.4:18446744073709551696", false},
	{"v1;tcp:1.2.3.4:1e2", false},
	// The version.
	{"v1:", false},
	{"v1:tcp:1.2.3.4:80", false},
	{"v10", false},
	{"v1x", false},
	{" v1", false},
	{"v1 ", false},
	{";v1", false},
	{"v1;v1", false},
	// The action.
	{"v1;else:reject;else:reject", false},
	{"v1;else:drop;else:drop", false},
	{"v1;else:reject;else:drop", false},
	{"v1;else:", false},
	{"v1;else:DROP", false},
	{"v1;else:drop ", false},
	{"v1;else:drop:x", false},
	{"v1;else", false},
	{"v1;ELSE:drop", false},
	// Empty entries.
	{"v1;;", false},
	{"v1;tcp:1.2.3.4:80;;", false},
	{"v1;:", false},
	{"v1;:1.2.3.4", false},
	{"v1;dns", false},
	// Unicode: digits and letters that are not ASCII.
	{"v1;tcp:１.2.3.4:80", false},
	{"v1;tcp:1.2.3.4:８0", false},
	{"v1;tcp:1.2.3.4:٨٠", false},
	{"v1;tcp:1.2.3.4:80\u00a0", false},
	{"ｖ1", false},
	{"v1;ｔcp:1.2.3.4:80", false},
	{"v1;tcp:1.2.3.4\u2024:80", false},
	{"v1;else:dro\u0440", false},
	{"v1;\xff", false},
	{"v1;tcp:1.2.3.4:80\xff", false},
	// NUL bytes.
	{"\x00", false},
	{"v1\x00", false},
	{"\x00v1", false},
	{"v1;\x00", false},
	{"v1;tcp:1.2.3.4:80\x00", false},
	{"v1;tcp:1.2.3.4\x00:80", false},
	{"v1;tcp\x00:1.2.3.4:80", false},
	{"v1;dns:1.1.1.1\x00", false},
	{"v1;else:drop\x00", false},
	{"v1;tcp:1.2.3.0/2\x004:80", false},
}

// entries builds "v1" followed by n entries made by f.
func entries(n int, f func(i int) string) string {
	var b strings.Builder
	b.WriteString("v1")
	for i := range n {
		b.WriteString(";" + f(i))
	}
	return b.String()
}

func host(i int) string { return fmt.Sprintf("tcp:10.0.%d.%d:80", i/256, i%256) }
func dns(i int) string  { return fmt.Sprintf("dns:10.1.%d.%d", i/256, i%256) }

// limitCases are the values at and past MaxEntries and MaxValueBytes.
func limitCases() []struct {
	name, in string
	ok       bool
} {
	long := "tcp:255.255.255.255:65535" // the longest host entry
	return []struct {
		name, in string
		ok       bool
	}{
		{"256 endpoints", entries(256, host), true},
		{"257 endpoints", entries(257, host), false},
		{"256 resolvers", entries(256, dns), true},
		{"257 resolvers", entries(257, dns), false},
		{"128 of each", entries(256, func(i int) string {
			if i%2 == 0 {
				return host(i)
			}
			return dns(i)
		}), true},
		{"255 endpoints and else", entries(255, host) + ";else:drop", true},
		{"256 endpoints and else", entries(256, host) + ";else:drop", false},
		{"256 endpoints, reversed", entries(256, func(i int) string { return host(255 - i) }), true},
		{"256 endpoints, shuffled", entries(256, func(i int) string { return host(i * 97 % 256) }), true},
		{"256 endpoints, last a duplicate", entries(255, host) + ";" + host(7), false},
		{"256 endpoints and an empty entry", entries(256, host) + ";", false},
		{"256 long entries", entries(256, func(i int) string {
			return fmt.Sprintf("udp:%d.255.255.255:%d", 200+i%56, 65535-i)
		}), true},
		{"257 long entries", entries(256, func(i int) string {
			return fmt.Sprintf("udp:%d.255.255.255:%d", 200+i%56, 65535-i)
		}) + ";" + long, false},
		{"16 KiB of x", "v1;" + strings.Repeat("x", policy.MaxValueBytes), false},
		{"16 KiB exactly", "v1;tcp:1.2.3.4:" + strings.Repeat("9", policy.MaxValueBytes-len("v1;tcp:1.2.3.4:")), false},
		{"16 KiB of ;", "v1" + strings.Repeat(";", policy.MaxValueBytes-2), false},
		{"16 KiB + 1 with a valid start", "v1;tcp:1.2.3.4:80;else:drop" + strings.Repeat("\x00", policy.MaxValueBytes), false},
		{"long port", "v1;tcp:1.2.3.4:1" + strings.Repeat("0", 5000), false},
		{"long address field", "v1;dns:1.2.3." + strings.Repeat("0", 5000), false},
		{"long bits", "v1;tcp:0.0.0.0/1" + strings.Repeat("0", 5000) + ":80", false},
	}
}

// compare runs both decoders on in and fails t when they disagree: the C
// accepting what Go refuses, accepting it as another allowlist (or in
// another order), or refusing what Go accepts. It returns Go's verdict.
func compare(t testing.TB, in string) bool {
	t.Helper()
	want, err := policy.Decode(in)
	got, ok := Decode(in)
	switch {
	case ok && err != nil:
		t.Fatalf("C accepts %q, Go refuses it: %v; C's allowlist: %+v", in, err, got)
	case !ok && err == nil:
		t.Fatalf("C refuses %q, which Go accepts as %+v", in, want)
	case ok:
		if !got.Equal(want) {
			t.Fatalf("%q: C's allowlist %+v differs from Go's %+v", in, got, want)
		}
		// Equal compares canonical forms: the C's must already be one,
		// as Decode's is, entry for entry.
		if !slices.Equal(got.Endpoints, want.Endpoints) || !slices.Equal(got.DNS, want.DNS) || got.Action != want.Action {
			t.Fatalf("%q: C's allowlist %+v is not Go's canonical %+v", in, got, want)
		}
	}
	return err == nil
}

func TestDecode(t *testing.T) {
	for _, tt := range decodeCases {
		t.Run(strconv.Quote(tt.in), func(t *testing.T) {
			if ok := compare(t, tt.in); ok != tt.ok {
				t.Fatalf("the table says Go's Decode ok=%v for %q, it says %v", tt.ok, tt.in, ok)
			}
		})
	}
	for _, tt := range limitCases() {
		t.Run(tt.name, func(t *testing.T) {
			if ok := compare(t, tt.in); ok != tt.ok {
				t.Fatalf("the table says Go's Decode ok=%v, it says %v", tt.ok, ok)
			}
		})
	}
}

// TestDecodeCorpora runs both decoders on policy's fuzz corpus for Decode
// and on this package's.
func TestDecodeCorpora(t *testing.T) {
	n := 0
	for _, dir := range []string{"../../../policy/testdata/fuzz/FuzzDecode", "testdata/fuzz/FuzzDecode"} {
		for _, v := range readCorpus(t, dir) {
			compare(t, v)
			n++
		}
	}
	if n < 40 {
		t.Fatalf("only %d corpus values", n)
	}
}

// TestDecodeGenerated runs both decoders on values assembled from pieces
// near the edges of what Decode accepts, many more than the fuzzer would
// reach soon by mutating bytes.
func TestDecodeGenerated(t *testing.T) {
	pieces := struct{ kind, addr, bits, port, act []string }{
		kind: []string{"tcp", "udp", "dns", "else", "Tcp", "", "tcp ", "icmp"},
		addr: []string{"0.0.0.0", "1.2.3.4", "10.0.0.0", "10.0.0.1", "255.255.255.255", "128.0.0.0", "01.2.3.4", "1.2.3", "1.2.3.256", "::ffff:1.2.3.4", "", "1.2.3.4%x", "10.0.0.0.", "9.0.0.0"},
		bits: []string{"", "/0", "/1", "/8", "/24", "/31", "/32", "/33", "/032", "/08", "/", "/+8", "/-1", "/8/8", "/ 8"},
		port: []string{"1", "80", "443", "65535", "65536", "0", "080", "+80", "", "99999", "8080", "53"},
		act:  []string{"drop", "reject", "", "Drop", "allow", "drop;"},
	}
	pick := func(r *rand.Rand, s []string) string { return s[r.IntN(len(s))] }
	r := rand.New(rand.NewPCG(1, 2))
	accepted := 0
	for range 20000 {
		var parts []string
		for range r.IntN(6) {
			var e string
			switch k := pick(r, pieces.kind); k {
			case "dns":
				e = k + ":" + pick(r, pieces.addr)
			case "else":
				e = k + ":" + pick(r, pieces.act)
			default:
				e = k + ":" + pick(r, pieces.addr) + pick(r, pieces.bits) + ":" + pick(r, pieces.port)
			}
			parts = append(parts, e)
			if r.IntN(8) == 0 { // a duplicate, perhaps
				parts = append(parts, parts[r.IntN(len(parts))])
			}
		}
		if compare(t, strings.Join(append([]string{"v1"}, parts...), ";")) {
			accepted++
		}
	}
	if accepted < 2000 {
		t.Fatalf("only %d generated values are valid: the generator tests too little", accepted)
	}
}

// readCorpus reads the string values of a directory of Go fuzz corpus
// files (each "go test fuzz v1" then one string(...) or []byte(...) line).
func readCorpus(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 1<<20)
		if !sc.Scan() || sc.Text() != "go test fuzz v1" {
			t.Fatalf("%s: not a fuzz corpus file", f)
		}
		for sc.Scan() {
			line := sc.Text()
			var q string
			if s, ok := strings.CutPrefix(line, "string("); ok {
				q = strings.TrimSuffix(s, ")")
			} else if s, ok := strings.CutPrefix(line, "[]byte("); ok {
				q = strings.TrimSuffix(s, ")")
			} else {
				t.Fatalf("%s: unexpected line %q", f, line)
			}
			v, err := strconv.Unquote(q)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			out = append(out, v)
		}
	}
	return out
}

// ids are container ids for ChainName: every length from 0 to 200 (the
// SHA-256 block boundaries at 55, 56, 63, 64, 65, 119, 120, 127, 128...)
// with ASCII letters and digits and without, Unicode, invalid UTF-8, NULs.
func ids() []string {
	out := []string{
		"a", "0123456789abcdef", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "-_./-_./", "--a--b--c--d--e--f--g--h--i--j--k",
		"é", "éa", "Kelvin\u212aK", "ß1ǅ2", "日本語のコンテナ", "\x00", "\x00a\x00b", "\xff", "a\xffb\xc3", "\xc3\xa9", "\xe2\x82", "\xf0\x9f\x98\x80x",
		"abcdefghij", "abcdefghijk", "abcdefghi", "_a_b_c_d_e_f_g_h_i_j_k_",
		strings.Repeat("a", 1000), strings.Repeat("\x80", 300) + "z",
		"4f1c8a9e6d2b7c3a5e8f0b1d2c3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e", // a Docker id
	}
	for n := range 201 {
		var a, b, c strings.Builder
		for i := range n {
			a.WriteByte("abcdefghijklmnopqrstuvwxyz0123456789"[i%36])
			b.WriteByte(byte(i * 37))
			c.WriteByte("-é_"[i%4%3])
		}
		out = append(out, a.String(), b.String(), c.String())
	}
	return out
}

func TestSHA256(t *testing.T) {
	for _, id := range ids() {
		if got, want := SHA256([]byte(id)), sha256.Sum256([]byte(id)); got != want {
			t.Errorf("SHA-256 of %d bytes %q: C %x, Go %x", len(id), id, got, want)
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		b := make([]byte, r.IntN(5000))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if got, want := SHA256(b), sha256.Sum256(b); got != want {
			t.Fatalf("SHA-256 of %d random bytes: C %x, Go %x", len(b), got, want)
		}
	}
	// FIPS 180-4's examples.
	for in, want := range map[string]string{
		"":    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"abc": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq": "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
	} {
		if got := SHA256([]byte(in)); fmt.Sprintf("%x", got) != want {
			t.Errorf("SHA-256 of %q: %x, want %s", in, got, want)
		}
	}
}

// compareChainName fails t when the C's name for id differs from
// policy.ChainName's, with a buffer as small as it may be and one byte
// smaller.
func compareChainName(t testing.TB, id string) {
	t.Helper()
	want, err := policy.ChainName(id)
	got, ok := ChainName(id, 64)
	switch {
	case err != nil && ok:
		t.Fatalf("C names %q %q, Go refuses it: %v", id, got, err)
	case err != nil:
		return
	case !ok:
		t.Fatalf("C refuses id %q, Go names it %q", id, want)
	case got != want:
		t.Fatalf("id %q: C names it %q, Go %q", id, got, want)
	}
	if len(got) > policy.MaxChainName {
		t.Fatalf("id %q: name %q is longer than %d", id, got, policy.MaxChainName)
	}
	if got, ok := ChainName(id, len(want)+1); !ok || got != want {
		t.Fatalf("id %q with a buffer of %d: %q, %v; want %q", id, len(want)+1, got, ok, want)
	}
	if got, ok := ChainName(id, len(want)); ok {
		t.Fatalf("id %q with a buffer of %d, no room for the NUL: %q, want a refusal", id, len(want), got)
	}
}

func TestChainName(t *testing.T) {
	for _, id := range append(ids(), readCorpus(t, "testdata/fuzz/FuzzChainName")...) {
		compareChainName(t, id)
	}
	if name, ok := ChainName("abc", 0); ok {
		t.Fatalf("a buffer of 0 bytes: %q", name)
	}
}

func FuzzDecode(f *testing.F) {
	for _, tt := range decodeCases {
		f.Add(tt.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		compare(t, in)
	})
}

func FuzzChainName(f *testing.F) {
	for _, id := range ids()[:40] {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		compareChainName(t, id)
		if got, want := SHA256([]byte(id)), sha256.Sum256([]byte(id)); got != want {
			t.Fatalf("SHA-256 of %q: C %x, Go %x", id, got, want)
		}
	})
}
