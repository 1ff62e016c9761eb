package installer

import (
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	tests := []struct {
		name          string
		before, after []byte
		want          string
	}{
		{"create", nil, []byte("a\nb\n"), "--- /dev/null\n+++ f\n@@ -0,0 +1,2 @@\n+a\n+b\n"},
		{"remove", []byte("a\n"), nil, "--- f\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"},
		{"same", []byte("a\n"), []byte("a\n"), "--- f\n+++ f\n"},
		{
			"middle change with context",
			[]byte("1\n2\n3\n4\n5\n6\n7\n8\n9\n"),
			[]byte("1\n2\n3\n4\nfive\n6\n7\n8\n9\n"),
			"--- f\n+++ f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n",
		},
		{
			"two hunks",
			[]byte("a\n1\n2\n3\n4\n5\n6\n7\n8\nb\n"),
			[]byte("A\n1\n2\n3\n4\n5\n6\n7\n8\nB\n"),
			"--- f\n+++ f\n@@ -1,4 +1,4 @@\n-a\n+A\n 1\n 2\n 3\n@@ -7,4 +7,4 @@\n 6\n 7\n 8\n-b\n+B\n",
		},
		{"append", []byte("a\n"), []byte("a\nb\n"), "--- f\n+++ f\n@@ -1 +1,2 @@\n a\n+b\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Diff("f", tt.before, tt.after); got != tt.want {
				t.Fatalf("Diff:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestDiffLarge(t *testing.T) {
	a := strings.Repeat("x\n", 3000)
	b := strings.Repeat("y\n", 3000)
	got := Diff("f", []byte(a), []byte(b))
	if strings.Count(got, "\n-x") != 3000 || strings.Count(got, "\n+y") != 3000 {
		t.Fatal("large diff lost lines")
	}
}
