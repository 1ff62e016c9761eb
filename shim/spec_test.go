package shim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sforge-dev/netiso/policy"
)

func loadFixture(t *testing.T) (dir string, s *Spec) {
	t.Helper()
	dir = t.TempDir()
	b, err := os.ReadFile("testdata/config.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, SpecFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = LoadSpec(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, s
}

// generic decodes a document into plain Go values for deep comparison.
func generic(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("invalid JSON written: %v\n%s", err, b)
	}
	return m
}

func TestSpecPatchPreservesUnknownFields(t *testing.T) {
	dir, s := loadFixture(t)
	timeout := 10
	if added, err := s.AddHook(StageCreateRuntime, Hook{Path: "/h", Args: []string{"sforge-hook", "createRuntime"}, Timeout: &timeout}); err != nil || !added {
		t.Fatalf("AddHook = %v, %v", added, err)
	}
	if changed, err := s.DropCapability("CAP_NET_RAW"); err != nil || !changed {
		t.Fatalf("DropCapability = %v, %v", changed, err)
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile("testdata/config.json")
	got, _ := os.ReadFile(filepath.Join(dir, SpecFile))
	want := generic(t, orig)
	have := generic(t, got)

	// Apply the two intended edits to the original by hand; everything
	// else must be identical, unknown members at every level included.
	proc := want["process"].(map[string]any)
	caps := proc["capabilities"].(map[string]any)
	for _, set := range capabilitySets {
		if l, ok := caps[set].([]any); ok {
			caps[set] = slices.DeleteFunc(l, func(x any) bool { return x == "CAP_NET_RAW" })
		}
	}
	hooks := want["hooks"].(map[string]any)
	hooks["createRuntime"] = []any{map[string]any{"path": "/h", "args": []any{"sforge-hook", "createRuntime"}, "timeout": float64(10)}}
	if !reflect.DeepEqual(have, want) {
		t.Fatalf("patched spec differs beyond the intended edits:\nhave %v\nwant %v", have, want)
	}
	// Unknown capability sets are not ours to edit.
	if fc := have["process"].(map[string]any)["capabilities"].(map[string]any)["futureCapSet"]; !reflect.DeepEqual(fc, []any{"CAP_NET_RAW"}) {
		t.Fatalf("futureCapSet changed: %v", fc)
	}
	if !strings.Contains(string(got), "<kept & unescaped>") {
		t.Fatalf("strings were re-escaped:\n%s", got)
	}
	st, err := os.Stat(filepath.Join(dir, SpecFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode not kept: %v %v", st.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left in the bundle: %v", entries)
	}
}

func TestAddHookIdempotent(t *testing.T) {
	_, s := loadFixture(t)
	h := Hook{Path: "/h", Args: []string{"sforge-hook", "poststop"}}
	for i, want := range []bool{true, false, false} {
		added, err := s.AddHook(StagePoststop, h)
		if err != nil || added != want {
			t.Fatalf("call %d: AddHook = %v, %v; want %v", i, added, err, want)
		}
	}
	hs, err := s.Hooks(StagePoststop)
	if err != nil || len(hs) != 1 {
		t.Fatalf("poststop hooks = %v, %v", hs, err)
	}
	// The existing prestart hook and its unknown field survive.
	b, _ := s.Bytes()
	if !strings.Contains(string(b), `"futureHookField":7`) {
		t.Fatalf("existing hook lost a field: %s", b)
	}
}

func TestDropCapabilityAbsent(t *testing.T) {
	s, err := ParseSpec([]byte(`{"process":{"capabilities":{"bounding":["CAP_CHOWN"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := s.DropCapability("CAP_NET_RAW"); err != nil || changed || s.Modified() {
		t.Fatalf("DropCapability = %v, %v, modified %v", changed, err, s.Modified())
	}
	s, _ = ParseSpec([]byte(`{"ociVersion":"1.0.2"}`))
	if changed, err := s.DropCapability("CAP_NET_RAW"); err != nil || changed {
		t.Fatalf("no process: DropCapability = %v, %v", changed, err)
	}
}

func TestParseSpecErrors(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{`[]`, "cannot unmarshal"},
		{`null`, "not a JSON object"},
		{`{"annotations": ["x"]}`, "field annotations"},
		{`{"process": {"env": "PATH=/bin"}}`, "field process.env"},
		{`{"process": 3}`, "field process"},
		{`{`, "unexpected end"},
	} {
		_, err := ParseSpec([]byte(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseSpec(%s) error = %v, want %q", tt.doc, err, tt.want)
		}
	}
	s, _ := ParseSpec([]byte(`{"hooks": {"createRuntime": {"path": "/x"}}}`))
	if _, err := s.AddHook(StageCreateRuntime, Hook{Path: "/h"}); err == nil || !strings.Contains(err.Error(), "hooks.createRuntime") {
		t.Errorf("AddHook on a malformed stage: %v", err)
	}
	s, _ = ParseSpec([]byte(`{"process": {"capabilities": {"bounding": "CAP_NET_RAW"}}}`))
	if _, err := s.DropCapability("CAP_NET_RAW"); err == nil || !strings.Contains(err.Error(), "capabilities.bounding") {
		t.Errorf("DropCapability on a malformed set: %v", err)
	}
}

func TestFlushUnmodifiedDoesNotWrite(t *testing.T) {
	dir, s := loadFixture(t)
	p := filepath.Join(dir, SpecFile)
	before, _ := os.Stat(p)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(p)
	if !os.SameFile(before, after) {
		t.Fatal("an unmodified spec was rewritten")
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	if err := os.WriteFile(p, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	// Keep the old file open: an atomic replace leaves the old inode's
	// content intact for readers that opened it before.
	old, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := WriteFileAtomic(p, []byte("new"), 0o640); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	ob := make([]byte, 3)
	if _, err := old.Read(ob); err != nil || string(ob) != "old" || string(b) != "new" {
		t.Fatalf("old reader saw %q, new content %q", ob, b)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", st.Mode())
	}
	// A directory that cannot hold the temporary file: the target stays.
	if err := WriteFileAtomic(filepath.Join(dir, "missing", "f"), []byte("x"), 0o644); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

func TestNetworkNamespace(t *testing.T) {
	for _, tt := range []struct {
		doc   string
		found bool
		path  string
	}{
		{`{"linux":{"namespaces":[{"type":"network"}]}}`, true, ""},
		{`{"linux":{"namespaces":[{"type":"network","path":"/run/netns/x"}]}}`, true, "/run/netns/x"},
		{`{"linux":{"namespaces":[{"type":"pid"}]}}`, false, ""},
		{`{}`, false, ""},
	} {
		s, err := ParseSpec([]byte(tt.doc))
		if err != nil {
			t.Fatal(err)
		}
		found, path, err := s.NetworkNamespace()
		if err != nil || found != tt.found || path != tt.path {
			t.Errorf("%s: NetworkNamespace = %v %q %v", tt.doc, found, path, err)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	b, _ := os.ReadFile("testdata/config.json")
	f.Add(b)
	f.Add([]byte(`{"process":{"capabilities":{"bounding":["CAP_NET_RAW"]}},"hooks":null}`))
	f.Add([]byte(`{"annotations":{"sforge.io/egress":"v1"}}`))
	f.Add([]byte(`{"annotations":{"sforge.io/preisolated-netns":"/proc/1/fd/3"},"linux":{"namespaces":[{"type":"network","path":"/proc/1/fd/3"},{"type":"user"}]}}`))
	f.Add([]byte(`{"annotations":{"sforge.io\/egress":"v1"},"process":{"env":["SFORGE_\u0045GRESS=v1"]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseSpec(b)
		if err != nil {
			return
		}
		// The shim hands a spec that does not mention sforge to runc
		// unparsed: such a spec must ask for nothing.
		if !(RawSpec{Data: b}).MentionsSforge() {
			_, found, _ := policy.Lookup(s.Annotations(), s.Env())
			_, marked := s.Annotations()[preisolatedAnnotation]
			if found || marked {
				t.Fatalf("a spec that MentionsSforge says nothing of asks for isolation: %q", b)
			}
		}
		_ = forgetPreisolated(s)
		_, _ = s.HasNamespace("user")
		_ = s.SetNetworkNamespacePath("/proc/1/fd/3")
		_ = s.SetAnnotation(preisolatedAnnotation, "/proc/1/fd/3")
		_, _ = s.DropCapability("CAP_NET_RAW")
		_, _ = s.AddHook(StageCreateRuntime, Hook{Path: "/h"})
		_, _, _ = s.NetworkNamespace()
		if out, err := s.Bytes(); err == nil {
			if _, err := ParseSpec(out); err != nil {
				t.Fatalf("re-encoded spec does not parse: %v", err)
			}
		}
	})
}

func TestSetNetworkNamespacePath(t *testing.T) {
	const doc = `{"linux":{"namespaces":[{"type":"pid"},{"type":"network","future":1}],"seccomp":{"x":[1,2]}},"z":true}`
	s, err := ParseSpec([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetNetworkNamespacePath("/proc/7/fd/9"); err != nil {
		t.Fatal(err)
	}
	b, _ := s.Bytes()
	if want := `{"linux":{"namespaces":[{"type":"pid"},{"future":1,"path":"/proc/7/fd/9","type":"network"}],"seccomp":{"x":[1,2]}},"z":true}`; string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if _, path, _ := s.NetworkNamespace(); path != "/proc/7/fd/9" {
		t.Fatalf("NetworkNamespace path %q after the change", path)
	}
	if err := s.SetNetworkNamespacePath(""); err != nil {
		t.Fatal(err)
	}
	if b, _ := s.Bytes(); !strings.Contains(string(b), `{"future":1,"type":"network"}`) {
		t.Fatalf("path not removed: %s", b)
	}
	none, _ := ParseSpec([]byte(`{"linux":{"namespaces":[{"type":"pid"}]}}`))
	if err := none.SetNetworkNamespacePath("/x"); err == nil {
		t.Fatal("no network entry: want an error")
	}
	bad, _ := ParseSpec([]byte(`{"linux":{"namespaces":[{"type":7}]}}`))
	if _, err := bad.HasNamespace("user"); err == nil || !strings.Contains(err.Error(), "linux.namespaces[0].type") {
		t.Fatalf("bad type: %v, want the field named", err)
	}
}

// A path the shim wrote on an earlier create of the bundle stands for a new
// namespace again; any other path is the user's and stays.
func TestForgetPreisolated(t *testing.T) {
	for _, tc := range []struct{ name, path, mark, wantPath string }{
		{"ours", "/proc/5/fd/3", "/proc/5/fd/3", ""},
		{"the user's", "/run/netns/x", "/proc/5/fd/3", "/run/netns/x"},
		{"no mark", "/run/netns/x", "", "/run/netns/x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := `{}`
			if tc.mark != "" {
				ann = `{"` + preisolatedAnnotation + `":"` + tc.mark + `"}`
			}
			s, err := ParseSpec([]byte(`{"annotations":` + ann + `,"linux":{"namespaces":[{"type":"network","path":"` + tc.path + `"}]}}`))
			if err != nil {
				t.Fatal(err)
			}
			if err := forgetPreisolated(s); err != nil {
				t.Fatal(err)
			}
			if _, path, _ := s.NetworkNamespace(); path != tc.wantPath {
				t.Fatalf("path %q, want %q", path, tc.wantPath)
			}
			if _, ok := s.Annotations()[preisolatedAnnotation]; ok {
				t.Fatal("mark kept")
			}
		})
	}
}

func TestMentionsSforge(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"annotations":{"sforge.io/egress":"v1"}}`:             true,
		`{"process":{"env":["SFORGE_EGRESS=v1"]}}`:              true,
		`{"annotations":{"sforge.io/preisolated-netns":"/x"}}`:  true,
		`{"annotations":{"sforge.io\/egress":"v1"}}`:            true, // escapes: parse to be sure
		`{"annotations":{"\u0073forge.io/egress":"v1"}}`:        true,
		`{"process":{"env":["PATH=/bin"]},"hostname":"sforge"}`: false,
		``: false,
	} {
		if got := (RawSpec{Data: []byte(doc)}).MentionsSforge(); got != want {
			t.Errorf("MentionsSforge(%s) = %v, want %v", doc, got, want)
		}
	}
}
