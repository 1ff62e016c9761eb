package installer

import (
	"bytes"
	"fmt"
	"strings"
)

// Diff renders the change of one file as a unified diff (3 lines of
// context). before or after nil stands for an absent file (/dev/null).
func Diff(path string, before, after []byte) string {
	from, to := path, path
	if before == nil {
		from = "/dev/null"
	}
	if after == nil {
		to = "/dev/null"
	}
	var w strings.Builder
	fmt.Fprintf(&w, "--- %s\n+++ %s\n", from, to)
	// A binary (the sforge-cni plugin) is named, not dumped.
	if bytes.IndexByte(before, 0) >= 0 || bytes.IndexByte(after, 0) >= 0 {
		fmt.Fprintf(&w, "Binary file %s: %d bytes -> %d bytes\n", path, len(before), len(after))
		return w.String()
	}
	a, b := splitLines(before), splitLines(after)
	ops := diffLines(a, b)
	const context = 3
	// Group the edit script into hunks separated by more than 2*context
	// unchanged lines.
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(i-context, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*context {
				end = min(end+context, len(ops))
				break
			}
			end = run
		}
		aStart, bStart := ops[start].a, ops[start].b
		var aLen, bLen int
		var body strings.Builder
		for _, op := range ops[start:end] {
			switch op.kind {
			case ' ':
				aLen++
				bLen++
			case '-':
				aLen++
			case '+':
				bLen++
			}
			body.WriteByte(op.kind)
			body.WriteString(op.text)
			body.WriteByte('\n')
		}
		fmt.Fprintf(&w, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
		w.WriteString(body.String())
		i = end
	}
	return w.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	s := strings.TrimSuffix(string(b), "\n")
	return strings.Split(s, "\n")
}

type lineOp struct {
	kind byte // ' ', '-', '+'
	text string
	a, b int // line index in a and b where the op starts
}

// diffLines is an LCS edit script; configuration files are small, and
// beyond a size bound the whole file is shown as replaced.
func diffLines(a, b []string) []lineOp {
	n, m := len(a), len(b)
	if n*m > 4_000_000 {
		ops := make([]lineOp, 0, n+m)
		for i, l := range a {
			ops = append(ops, lineOp{'-', l, i, 0})
		}
		for j, l := range b {
			ops = append(ops, lineOp{'+', l, n, j})
		}
		return ops
	}
	// lcs[i][j] = LCS length of a[i:], b[j:].
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []lineOp
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			ops = append(ops, lineOp{' ', a[i], i, j})
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, lineOp{'-', a[i], i, j})
			i++
		default:
			ops = append(ops, lineOp{'+', b[j], i, j})
			j++
		}
	}
	return ops
}
