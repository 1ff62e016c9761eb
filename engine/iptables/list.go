package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// lister reads a chain back with `iptables -S`, as go-iptables' List and
// ChainExists do, without what go-iptables costs every process that links
// it: a regular expression compiled at start-up (with the Unicode tables
// it pulls in, about 0.1 ms of each sforge-hook and sforge-runtime start,
// the paths that do not use iptables included), and an `iptables
// --version` run per family and install to find out whether --wait takes
// seconds (it has since iptables 1.4.22; iptables-restore is run with
// --wait=N already).
type lister struct {
	path    string
	timeout time.Duration
}

// List returns the rules of chain in table, one `-S` line each.
func (l lister) List(table, chain string) ([]string, error) {
	out, err := l.run("-t", table, "-S", chain)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(string(out), "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	for i, r := range lines {
		lines[i] = moveCounters(r)
	}
	return lines, nil
}

// ChainExists reports whether chain exists in table: `-S chain 1` (its
// first rule) exits with status 1 when it does not.
func (l lister) ChainExists(table, chain string) (bool, error) {
	_, err := l.run("-t", table, "-S", chain, "1")
	var le *listError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &le) && le.status == 1:
		return false, nil
	}
	return false, err
}

func (l lister) run(args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	secs := max(1, int(l.timeout/time.Second)-1)
	cmd := exec.CommandContext(ctx, l.path, append(args, "--wait", strconv.Itoa(secs))...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		status := -1
		var xe *exec.ExitError
		if errors.As(err, &xe) {
			status = xe.ExitCode()
		}
		return nil, &listError{cmd: l.path + " " + strings.Join(args, " "), status: status, stderr: strings.TrimSpace(stderr.String()), err: err}
	}
	return stdout.Bytes(), nil
}

// listError is a failed `iptables -S`.
type listError struct {
	cmd    string
	status int
	stderr string
	err    error
}

func (e *listError) Error() string {
	if e.stderr == "" {
		return fmt.Sprintf("running %s: %v", e.cmd, e.err)
	}
	return fmt.Sprintf("running %s: %v: %s", e.cmd, e.err, e.stderr)
}

func (e *listError) Unwrap() error { return e.err }

// moveCounters rewrites a rule that iptables-nft printed with its counters
// first, in iptables-save form ("[0:0] -A ..."), as `-S` prints them
// ("-A ... -c 0 0"), as go-iptables does.
func moveCounters(rule string) string {
	if !strings.HasPrefix(rule, "[") {
		return rule
	}
	end := strings.Index(rule, "] ")
	if end < 0 {
		return rule
	}
	pkts, bytes, ok := strings.Cut(rule[1:end], ":")
	if !ok || !digits(pkts) || !digits(bytes) {
		return rule
	}
	return rule[end+2:] + " -c " + pkts + " " + bytes
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
