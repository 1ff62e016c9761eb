package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLogSizesGrown(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, flag int) {
		f, err := os.OpenFile(filepath.Join(dir, name), flag|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(data); err != nil {
			t.Fatal(err)
		}
	}
	write("hook.log", "one\n", os.O_TRUNC)
	write("cni.log", "one\n", os.O_TRUNC)
	s := SnapshotLogs(dir)
	if g := s.Grown(); len(g) != 0 {
		t.Fatalf("nothing changed, got %q", g)
	}
	write("hook.log", "two\n", os.O_APPEND)
	write("cni.log", "", os.O_TRUNC) // shrank: not a write by the run to report
	write("runtime.log", "new\n", os.O_TRUNC)
	want := []string{
		filepath.Join(dir, "hook.log") + " grew from 4 to 8 bytes",
		filepath.Join(dir, "runtime.log") + " appeared (4 bytes)",
	}
	if g := s.Grown(); !slices.Equal(g, want) {
		t.Fatalf("Grown() = %q, want %q", g, want)
	}
	var report strings.Builder
	if s.Clean(&report, "test") || report.String() != "test: FAIL: the run wrote to the host's logs: "+want[0]+"\n"+
		"test: FAIL: the run wrote to the host's logs: "+want[1]+"\n" {
		t.Fatalf("Clean reported %q", report.String())
	}
	if !SnapshotLogs(dir).Clean(&report, "test") {
		t.Fatal("a fresh snapshot is not clean")
	}
	if g := SnapshotLogs(filepath.Join(dir, "absent")).Grown(); len(g) != 0 {
		t.Fatalf("absent directory: %q", g)
	}
}
