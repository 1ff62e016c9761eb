package resolver

import (
	"encoding/binary"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// FuzzHandle feeds the resolver arbitrary datagrams: it must never panic,
// answer only with a well-formed reply to the query's id, never give an
// address for a name that is not pinned, and keep its table bounded.
func FuzzHandle(f *testing.F) {
	f.Add(query(f, 1, "judge.local.", dnsmessage.TypeA))
	f.Add(query(f, 2, "github.com.", dnsmessage.TypeAAAA))
	f.Add(rawQuery(3, []byte{0, 0xff, '.'}, []byte("invalid")))
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Add(append(query(f, 4, "api.example.com.", dnsmessage.TypeA), 0xc0, 0x0c))
	s := newServer(Config{MaxNames: 16})
	buf := make([]byte, 0, 512)
	f.Fuzz(func(t *testing.T, req []byte) {
		out := s.Handle(req, buf)
		if len(s.Stats().Refused) > 16 {
			t.Fatal("the name table outgrew its bound")
		}
		if out == nil {
			return
		}
		if len(req) < 2 || binary.BigEndian.Uint16(out) != binary.BigEndian.Uint16(req) {
			t.Fatalf("reply id %x for query %x", out[:2], req[:min(len(req), 2)])
		}
		var p dnsmessage.Parser
		h, err := p.Start(out)
		if err != nil || !h.Response {
			t.Fatalf("malformed reply %x: %v", out, err)
		}
		qs, err := p.AllQuestions()
		if err != nil {
			t.Fatal(err)
		}
		ans, err := p.AllAnswers()
		if err != nil {
			t.Fatal(err)
		}
		if len(ans) > 0 && (len(qs) != 1 || s.names[NameText(qs[0].Name)] == nil) {
			t.Fatalf("answered %v for %v", ans, qs)
		}
	})
}
