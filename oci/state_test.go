package oci

import (
	"strings"
	"testing"
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
