package resolver

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/sforge-dev/netiso/policy"
)

func query(t testing.TB, id uint16, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	out, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rawQuery builds an A query from labels, which may hold any byte.
func rawQuery(id uint16, labels ...[]byte) []byte {
	q := binary.BigEndian.AppendUint16(nil, id)
	q = append(q, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0)
	for _, l := range labels {
		q = append(q, byte(len(l)))
		q = append(q, l...)
	}
	return append(q, 0, 0, 1, 0, 1)
}

type reply struct {
	h     dnsmessage.Header
	addrs []netip.Addr
	qname string
}

func parse(t testing.TB, b []byte) reply {
	t.Helper()
	var p dnsmessage.Parser
	h, err := p.Start(b)
	if err != nil {
		t.Fatalf("reply does not parse: %v", err)
	}
	r := reply{h: h}
	qs, err := p.AllQuestions()
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) == 1 {
		r.qname = qs[0].Name.String()
	}
	ans, err := p.AllAnswers()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range ans {
		if ar, ok := a.Body.(*dnsmessage.AResource); ok {
			r.addrs = append(r.addrs, netip.AddrFrom4(ar.A))
		}
	}
	return r
}

var (
	judge = netip.MustParseAddr("10.0.0.12")
	api1  = netip.MustParseAddr("198.51.100.7")
	api2  = netip.MustParseAddr("198.51.100.8")
)

func newServer(c Config) *Server {
	if c.Names == nil {
		c.Names = map[string][]netip.Addr{"judge.local": {judge}, "api.example.com": {api1, api2}}
	}
	if c.Rate == 0 {
		c.Rate, c.Burst = 1e9, 1e6
	}
	return New(c)
}

func TestPinnedNamesAnswered(t *testing.T) {
	s := newServer(Config{})
	buf := make([]byte, 0, 512)
	r := parse(t, s.Handle(query(t, 7, "API.Example.com.", dnsmessage.TypeA), buf))
	if r.h.ID != 7 || !r.h.Response || r.h.RCode != dnsmessage.RCodeSuccess || len(r.addrs) != 2 || r.addrs[0] != api1 || r.addrs[1] != api2 {
		t.Fatalf("pinned A: %+v", r)
	}
	if r.qname != "API.Example.com." {
		t.Fatalf("the question must be echoed as asked (0x20 case): %q", r.qname)
	}
	r = parse(t, s.Handle(query(t, 8, "judge.local.", dnsmessage.TypeAAAA), buf))
	if r.h.RCode != dnsmessage.RCodeSuccess || len(r.addrs) != 0 {
		t.Fatalf("pinned AAAA must be an empty answer: %+v", r)
	}
	st := s.Stats()
	if st.Answered != 2 || len(st.Refused) != 0 || st.Total() != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestOtherNamesRefusedAndRecorded(t *testing.T) {
	s := newServer(Config{})
	buf := make([]byte, 0, 512)
	for i := range 3 {
		r := parse(t, s.Handle(query(t, uint16(i), "GitHub.com.", dnsmessage.TypeA), buf))
		if r.h.RCode != dnsmessage.RCodeRefused || len(r.addrs) != 0 || !r.h.Response {
			t.Fatalf("github.com: %+v", r)
		}
	}
	parse(t, s.Handle(query(t, 9, "pypi.org.", dnsmessage.TypeAAAA), buf))
	// A pinned name in another class is not the pinned name.
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 10})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("judge.local."), Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassCHAOS})
	q, _ := b.Finish()
	if r := parse(t, s.Handle(q, buf)); r.h.RCode != dnsmessage.RCodeRefused {
		t.Fatalf("CHAOS class: %+v", r)
	}
	st := s.Stats()
	want := []NameCount{{"github.com", 3}, {"judge.local", 1}, {"pypi.org", 1}}
	if len(st.Refused) != len(want) {
		t.Fatalf("refused %+v", st.Refused)
	}
	for i := range want {
		if st.Refused[i] != want[i] {
			t.Fatalf("refused %+v, want %+v", st.Refused, want)
		}
	}
	if st.Total() != 5 || st.Answered != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestBinaryAndLongLabelsRecordedEscaped(t *testing.T) {
	s := newServer(Config{})
	buf := make([]byte, 0, 512)
	bin := []byte{0, 1, ' ', 0x7f, 0xff, 'A', '\\', '_'}
	if r := parse(t, s.Handle(rawQuery(1, bin, []byte("x"), []byte("invalid")), buf)); r.h.RCode != dnsmessage.RCodeRefused {
		t.Fatalf("binary: %+v", r)
	}
	long := strings.Repeat("7a", 31) + "7"
	var ls [][]byte
	for range 3 {
		ls = append(ls, []byte(long))
	}
	ls = append(ls, []byte("zone"), []byte("invalid"))
	if r := parse(t, s.Handle(rawQuery(2, ls...), buf)); r.h.RCode != dnsmessage.RCodeRefused {
		t.Fatalf("long: %+v", r)
	}
	// Binary bytes everywhere: the record is cut.
	var huge [][]byte
	for range 3 {
		huge = append(huge, []byte(strings.Repeat("\xfe", 63)))
	}
	parse(t, s.Handle(rawQuery(3, huge...), buf))
	got := map[string]uint64{}
	for _, n := range s.Stats().Refused {
		got[n.Name] = n.Count
	}
	if got[`\000\001\032\127\255a\092_.x.invalid`] != 1 {
		t.Fatalf("binary label not recorded escaped: %v", got)
	}
	if got[long+"."+long+"."+long+".zone.invalid"] != 1 {
		t.Fatalf("long name not recorded whole: %v", got)
	}
	label := strings.Repeat(`\254`, 63)
	cut := (label + "." + label + "." + label)[:MaxNameText] + "..."
	if got[cut] != 1 {
		t.Fatalf("huge name not cut to %d: %v", MaxNameText, got)
	}
}

func TestMalformed(t *testing.T) {
	s := newServer(Config{})
	buf := make([]byte, 0, 512)
	if out := s.Handle([]byte{1, 2, 3}, buf); out != nil {
		t.Fatalf("a short packet must get no reply: %x", out)
	}
	resp := query(t, 4, "judge.local.", dnsmessage.TypeA)
	resp[2] |= 0x80 // QR
	if out := s.Handle(resp, buf); out != nil {
		t.Fatalf("an answer must get no reply")
	}
	two := query(t, 5, "judge.local.", dnsmessage.TypeA)
	two[5] = 2 // QDCOUNT 2 with one question
	if r := parse(t, s.Handle(two, buf)); r.h.RCode != dnsmessage.RCodeFormatError {
		t.Fatalf("two questions: %+v", r)
	}
	notify := query(t, 6, "judge.local.", dnsmessage.TypeA)
	notify[2] |= 4 << 3 // opcode NOTIFY
	if r := parse(t, s.Handle(notify, buf)); r.h.RCode != dnsmessage.RCodeNotImplemented {
		t.Fatalf("notify: %+v", r)
	}
	dotted := rawQuery(7, []byte("a.b"), []byte("invalid"))
	if r := parse(t, s.Handle(dotted, buf)); r.h.RCode != dnsmessage.RCodeFormatError {
		t.Fatalf("a label holding a dot: %+v", r)
	}
	st := s.Stats()
	if st.Malformed != 5 || st.Answered != 0 || len(st.Refused) != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestNameTableBounded(t *testing.T) {
	s := newServer(Config{MaxNames: 4})
	buf := make([]byte, 0, 512)
	for i := range 10 {
		s.Handle(query(t, uint16(i), "n"+string(rune('a'+i))+".example.", dnsmessage.TypeA), buf)
	}
	s.Handle(query(t, 11, "na.example.", dnsmessage.TypeA), buf) // known: still counted
	st := s.Stats()
	if len(st.Refused) != 4 || st.Uncounted != 6 || st.Total() != 11 {
		t.Fatalf("stats %+v", st)
	}
	if st.Refused[0] != (NameCount{"na.example", 2}) {
		t.Fatalf("most asked first: %+v", st.Refused)
	}
}

func TestRateLimited(t *testing.T) {
	s := New(Config{Rate: 1, Burst: 10})
	buf := make([]byte, 0, 512)
	q := query(t, 1, "flood.example.", dnsmessage.TypeA)
	replies := 0
	for range 1000 {
		if s.Handle(q, buf) != nil {
			replies++
		}
	}
	st := s.Stats()
	if st.Limited+uint64(replies) != 1000 || replies < 10 || st.Limited < 900 {
		t.Fatalf("replies %d, stats %+v", replies, st)
	}
	if st.Total() != uint64(replies) {
		t.Fatalf("only answered queries are recorded: %+v", st)
	}
}

func TestFromAllowlist(t *testing.T) {
	a, err := policy.Decode("v1;tcp:10.0.0.12:8080;resolver:127.0.0.53;name:judge.local=10.0.0.12;name:api.example.com=198.51.100.7;name:api.example.com=198.51.100.8")
	if err != nil {
		t.Fatal(err)
	}
	c := FromAllowlist(a)
	if len(c.Names) != 2 || len(c.Names["api.example.com"]) != 2 || c.Names["judge.local"][0] != judge {
		t.Fatalf("config %+v", c)
	}
}

// TestServeUDPAndTCPUnderLoad floods a server on real loopback sockets with
// unique names: nothing is lost or answered wrongly, the table stays at its
// bound, and the heap does not grow with the flood.
func TestServeUDPAndTCPUnderLoad(t *testing.T) {
	s := newServer(Config{MaxNames: 64})
	udp, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- s.ServeUDP(udp) }()
	go func() { done <- s.ServeTCP(tcp) }()

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	c, err := net.DialUDP("udp4", nil, udp.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 20000
	long := strings.Repeat("q", 60)
	buf := make([]byte, 1500)
	for i := range n {
		name := long + "." + long + "." + long + ".n" + strconv.Itoa(i) + ".invalid."
		if _, err := c.Write(query(t, uint16(i), name, dnsmessage.TypeA)); err != nil {
			t.Fatal(err)
		}
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		m, err := c.Read(buf)
		if err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
		if r := parse(t, buf[:m]); r.h.ID != uint16(i) || r.h.RCode != dnsmessage.RCodeRefused || len(r.addrs) != 0 {
			t.Fatalf("query %d: %+v", i, r)
		}
	}
	// Binary junk must not stop it.
	for i := range 200 {
		junk := make([]byte, i)
		for j := range junk {
			junk[j] = byte(i * j)
		}
		_, _ = c.Write(junk)
	}
	// The replies to junk that parses as a query come first.
	if _, err := c.Write(query(t, 60000, "sync.example.", dnsmessage.TypeA)); err != nil {
		t.Fatal(err)
	}
	for {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if m >= 2 && binary.BigEndian.Uint16(buf) == 60000 {
			break
		}
	}

	// TCP: two queries on one connection, then an oversized length.
	tc, err := net.Dial("tcp4", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	for i, name := range []string{"judge.local.", "tcp.example."} {
		q := query(t, uint16(100+i), name, dnsmessage.TypeA)
		if _, err := tc.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
			t.Fatal(err)
		}
		var l [2]byte
		if _, err := io.ReadFull(tc, l[:]); err != nil {
			t.Fatal(err)
		}
		m := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(tc, m); err != nil {
			t.Fatal(err)
		}
		r := parse(t, m)
		if want := []dnsmessage.RCode{dnsmessage.RCodeSuccess, dnsmessage.RCodeRefused}[i]; r.h.RCode != want || r.h.ID != uint16(100+i) {
			t.Fatalf("tcp %s: %+v", name, r)
		}
	}
	if _, err := tc.Write([]byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Read(make([]byte, 1)); err == nil {
		t.Fatal("an oversized TCP message must close the connection")
	}

	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	udp.Close()
	tcp.Close()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	if len(st.Refused) != 64 || st.Total() != n+2 || st.Uncounted != n+2-64 || st.Answered != 1 {
		t.Fatalf("stats: %d names, total %d, uncounted %d, answered %d", len(st.Refused), st.Total(), st.Uncounted, st.Answered)
	}
	if st.Malformed < 190 {
		t.Fatalf("junk not counted as malformed: %+v", st.Malformed)
	}
	// Unbounded, the table alone would hold n names of 200 bytes.
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 2<<20 {
		t.Fatalf("heap grew by %d bytes over the flood", grew)
	}
}
