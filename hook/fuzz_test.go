package hook

import (
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/policy"
)

// FuzzReadState: the runtime's state JSON is outside input; any bytes give
// a state that passed validation or an error, never a panic.
func FuzzReadState(f *testing.F) {
	f.Add([]byte(`{"ociVersion":"1.0.2-dev","id":"c1","status":"creating","pid":42,"bundle":"/run/b"}`))
	f.Add([]byte(`{"id":"","pid":-1,"bundle":"rel"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ReadState(strings.NewReader(string(data)))
		if err != nil {
			return
		}
		if st.ID == "" || !strings.HasPrefix(st.Bundle, "/") || st.Pid < 0 {
			t.Fatalf("invalid state accepted: %+v", st)
		}
	})
}

// FuzzSpecDecisions: config.json is written from user input (annotations,
// capabilities, namespaces); deciding on it never panics and a refusal
// always names a fix.
func FuzzSpecDecisions(f *testing.F) {
	f.Add([]byte(`{"ociVersion":"1.0.2","annotations":{"sforge.io/egress":"v1;tcp:1.2.3.4:80"},"process":{"env":["SFORGE_EGRESS=v1"],"capabilities":{"bounding":["CAP_NET_RAW"]}},"linux":{"namespaces":[{"type":"network","path":"/run/netns/x"}]}}`))
	f.Add([]byte(`{"process":{"capabilities":{}},"linux":{}}`))
	f.Add([]byte(`{"process":null,"linux":{"namespaces":[{"type":"network"},{"type":"network"}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec(data)
		if err != nil {
			return
		}
		if value, found, err := policy.Lookup(s.Annotations, processEnv(s)); err == nil && found {
			_, _ = policy.Decode(value)
		}
		_ = netNamespace(s)
		if cause, fix := checkCaps(s); cause != "" && fix == "" {
			t.Fatalf("refusal %q without a fix", cause)
		}
	})
}
