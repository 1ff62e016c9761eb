package hook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestReadState(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"runc", `{"ociVersion":"1.0.2-dev","id":"c1","status":"creating","pid":42,"bundle":"/run/b"}`, ""},
		{"poststop without pid", `{"ociVersion":"1.0.2","id":"c1","status":"stopped","bundle":"/run/b"}`, ""},
		{"empty", ``, "failed to decode"},
		{"not json", `id=c1`, "failed to decode"},
		{"no id", `{"pid":1,"bundle":"/b"}`, "has no id"},
		{"relative bundle", `{"id":"c","pid":1,"bundle":"b"}`, `bundle "b" is not an absolute path`},
		{"no bundle", `{"id":"c","pid":1}`, "is not an absolute path"},
		{"negative pid", `{"id":"c","pid":-1,"bundle":"/b"}`, "negative"},
		{"pid not a number", `{"id":"c","pid":"1","bundle":"/b"}`, "failed to decode"},
		{"too large", `{"id":"` + strings.Repeat("x", maxStateBytes) + `"}`, "larger than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := ReadState(strings.NewReader(c.in))
			if c.wantErr == "" {
				if err != nil || st.ID != "c1" {
					t.Fatalf("ReadState = %+v, %v", st, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("ReadState error = %v, want %q", err, c.wantErr)
			}
		})
	}
}

func TestLoadSpec(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadSpec(dir); err == nil || !strings.Contains(err.Error(), "failed to open the container's config") {
		t.Fatalf("LoadSpec without config.json = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"annotations": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSpec(dir); err == nil || !strings.Contains(err.Error(), "failed to decode") {
		t.Fatalf("LoadSpec of a bad config.json = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"ociVersion":"1.0.2","annotations":{"a":"b"},"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/run/netns/x"}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := LoadSpec(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := netNamespace(s); n == nil || n.Path != "/run/netns/x" {
		t.Fatalf("netNamespace = %+v", n)
	}
	if n := netNamespace(&specs.Spec{}); n != nil {
		t.Fatalf("netNamespace of a spec without linux = %+v", n)
	}
}
