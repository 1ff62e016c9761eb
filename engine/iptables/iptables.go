// Package iptables is the rule engine that writes a container's allowlist
// with iptables-restore inside its network namespace, on either iptables
// backend (nft or legacy).
//
// Each family is installed with one `iptables-restore --noflush`
// transaction, so a crash leaves either the old state or the new one, and
// the result is read back with go-iptables and compared with what was
// rendered before the install counts as done.
package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	goipt "github.com/coreos/go-iptables/iptables"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/policy"
)

// Options configure an Engine. The zero value detects everything.
type Options struct {
	// Backend forces nft or legacy; Auto (or "") detects it per namespace.
	Backend Backend
	// Path lists the directories searched for the iptables binaries, in
	// $PATH form. Empty: $PATH, or the standard directories when $PATH is
	// unset (OCI runtimes may start hooks with an empty environment).
	Path string
	// ProcSys is the root of the sysctl tree written to disable IPv6 when
	// ip6tables cannot be used; "/proc/sys" when empty.
	ProcSys string
	// Timeout bounds each iptables command, waiting for the xtables lock
	// included; 30s when zero. A hook that hangs holds up a container
	// start with no message.
	Timeout time.Duration
}

// Engine implements engine.Engine with iptables-restore.
type Engine struct {
	opts Options
}

var _ engine.Engine = (*Engine)(nil)

// New returns an engine. It runs nothing: binaries are found and the
// backend chosen per call, inside the target namespace.
func New(opts Options) *Engine {
	if opts.Backend == "" {
		opts.Backend = Auto
	}
	if opts.ProcSys == "" {
		opts.ProcSys = "/proc/sys"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	return &Engine{opts: opts}
}

// Name is "iptables" when the backend is detected per namespace, else
// "iptables-nft" or "iptables-legacy". Reports name the backend used.
func (e *Engine) Name() string {
	if e.opts.Backend == Auto {
		return "iptables"
	}
	return "iptables-" + string(e.opts.Backend)
}

var families = []policy.Family{policy.IPv4, policy.IPv6}

// Install implements engine.Engine.
func (e *Engine) Install(t engine.Target, a policy.Allowlist) (engine.Report, error) {
	start := time.Now()
	rep := engine.Report{}
	rs, err := policy.Rules(a)
	if err != nil {
		return rep, fmt.Errorf("failed to render rules: %w", err)
	}
	rep.Chain, err = policy.ChainName(t.ID)
	if err != nil {
		return rep, fmt.Errorf("failed to name the chain: %w", err)
	}
	err = engine.WithNetNS(t.NetNS, func() error {
		_, b, err := e.backendHere()
		if err != nil {
			return err
		}
		rep.Engine = "iptables-" + string(b)
		v4, err := e.family(b, policy.IPv4)
		if err != nil {
			return err
		}
		if err := v4.install(rep.Chain, rs.IPv4); err != nil {
			return e.undo(err, b, rep.Chain)
		}
		rep.Rules = len(rs.IPv4)
		v6, v6err := e.family(b, policy.IPv6)
		if v6err == nil {
			if v6err = v6.install(rep.Chain, rs.IPv6); v6err == nil {
				rep.Rules += len(rs.IPv6)
				rep.IPv6 = "filtered"
				return nil
			}
			// Whatever an earlier install left in ip6tables is
			// superseded by disabling IPv6.
			_ = v6.remove(rep.Chain)
		}
		state, err := e.disableIPv6()
		if err != nil {
			return e.undo(fmt.Errorf("failed to filter IPv6 (%v) and failed to disable it: %w", v6err, err), b, rep.Chain)
		}
		rep.IPv6 = state
		return nil
	})
	rep.Duration = time.Since(start)
	return rep, err
}

// undo removes whatever of chain exists after a failed install, so that
// the failure leaves no half policy behind, and returns cause joined with
// any failure to clean up.
func (e *Engine) undo(cause error, b Backend, chain string) error {
	errs := []error{cause}
	for _, f := range families {
		fam, err := e.family(b, f)
		if err != nil {
			continue // nothing can have been installed with it
		}
		if err := fam.remove(chain); err != nil {
			errs = append(errs, fmt.Errorf("failed to remove the partial %s rules: %w", f, err))
		}
	}
	return errors.Join(errs...)
}

// Remove implements engine.Engine. With Auto it removes the chain from
// every backend that has a filter table in the namespace, so a chain
// installed under another backend choice is not left behind.
func (e *Engine) Remove(t engine.Target) error {
	chain, err := policy.ChainName(t.ID)
	if err != nil {
		return fmt.Errorf("failed to name the chain: %w", err)
	}
	backends := []Backend{e.opts.Backend}
	if e.opts.Backend == Auto {
		backends = []Backend{NFT, Legacy}
	}
	return engine.WithNetNS(t.NetNS, func() error {
		tables, err := readTables()
		if err != nil {
			return err
		}
		var errs []error
		for _, b := range backends {
			for _, f := range families {
				if !tables.hasFilter(b, f) {
					continue // no filter table: no chain of ours
				}
				fam, err := e.family(b, f)
				if err == nil {
					err = fam.remove(chain)
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("failed to remove chain %s (%s, iptables-%s): %w", chain, f, b, err))
				}
			}
		}
		return errors.Join(errs...)
	})
}

// Check implements engine.Engine: the chain must hold exactly the rules
// rendered from a, each hook must jump to it once with nothing but other
// sforge jumps before, and IPv6 must be filtered the same way or disabled.
func (e *Engine) Check(t engine.Target, a policy.Allowlist) error {
	rs, err := policy.Rules(a)
	if err != nil {
		return fmt.Errorf("failed to render rules: %w", err)
	}
	chain, err := policy.ChainName(t.ID)
	if err != nil {
		return fmt.Errorf("failed to name the chain: %w", err)
	}
	return engine.WithNetNS(t.NetNS, func() error {
		_, b, err := e.backendHere()
		if err != nil {
			return err
		}
		v4, err := e.family(b, policy.IPv4)
		if err != nil {
			return err
		}
		if ok, err := v4.ipt.ChainExists("filter", chain); err != nil {
			return fmt.Errorf("failed to look for chain %s: %w", chain, err)
		} else if !ok {
			return fmt.Errorf("%w: no chain %s (iptables-%s)", engine.ErrNotInstalled, chain, b)
		}
		if err := v4.verify(chain, rs.IPv4); err != nil {
			return err
		}
		if v6, err := e.family(b, policy.IPv6); err == nil {
			ok, err := v6.ipt.ChainExists("filter", chain)
			if err != nil {
				return fmt.Errorf("failed to look for chain %s (ipv6): %w", chain, err)
			}
			if ok {
				return v6.verify(chain, rs.IPv6)
			}
		}
		if disabled, err := e.ipv6Disabled(); err != nil {
			return err
		} else if !disabled {
			return fmt.Errorf("IPv6 is neither filtered by chain %s nor disabled", chain)
		}
		return nil
	})
}

// family holds the binaries of one backend and family.
type family struct {
	f       policy.Family
	name    string // e.g. "ip6tables-nft", for errors
	restore string
	ipt     *goipt.IPTables
	timeout time.Duration
}

func (e *Engine) family(b Backend, f policy.Family) (*family, error) {
	restore, list, err := e.binaries(b, f)
	if err != nil {
		return nil, err
	}
	proto := goipt.ProtocolIPv4
	if f == policy.IPv6 {
		proto = goipt.ProtocolIPv6
	}
	secs := int(e.opts.Timeout / time.Second)
	ipt, err := goipt.New(goipt.IPFamily(proto), goipt.Path(list), goipt.Timeout(secs))
	if err != nil {
		return nil, fmt.Errorf("failed to use %s: %w", list, err)
	}
	return &family{f: f, name: binaryPrefix(f) + "-" + string(b), restore: restore, ipt: ipt, timeout: e.opts.Timeout}, nil
}

// jumps counts, per hook, the rules that jump to chain.
func (fam *family) jumps(chain string) (map[string]int, error) {
	out := map[string]int{}
	for _, h := range policy.Hooks(fam.f) {
		listed, err := fam.ipt.List("filter", h)
		if err != nil {
			return nil, fmt.Errorf("failed to list %s %s: %w", fam.name, h, err)
		}
		out[h] = countJumps(chain, h, listed)
	}
	return out, nil
}

// install loads chain with rules and its jumps in one transaction, then
// verifies the result.
func (fam *family) install(chain string, rules []policy.Rule) error {
	existing, err := fam.jumps(chain)
	if err != nil {
		return err
	}
	if err := fam.run(installPayload(fam.f, chain, rules, existing)); err != nil {
		return err
	}
	return fam.verify(chain, rules)
}

// installPayload is policy.RestoreInstall with the jumps a previous
// install left deleted first. A re-run thus replaces the chain and moves
// its jump back to the top of each hook in the same transaction, instead
// of keeping a jump that something may have been inserted above since.
func installPayload(f policy.Family, chain string, rules []policy.Rule, existing map[string]int) string {
	p := policy.RestoreInstall(f, chain, rules, true)
	var del strings.Builder
	for _, h := range policy.Hooks(f) {
		for range existing[h] {
			fmt.Fprintf(&del, "-D %s -j %s\n", h, chain)
		}
	}
	if del.Len() == 0 {
		return p
	}
	// Deletions must come before the insertions: "-D" removes the first
	// matching rule, which would otherwise be the new jump.
	i := strings.Index(p, "\n-I ") + 1
	return p[:i] + del.String() + p[i:]
}

func (fam *family) verify(chain string, rules []policy.Rule) error {
	listed, err := fam.ipt.List("filter", chain)
	if err != nil {
		return fmt.Errorf("failed to list %s chain %s: %w", fam.name, chain, err)
	}
	if err := compareChain(fam.f, chain, listed, policy.IPTablesRules(rules)); err != nil {
		return fmt.Errorf("%s: %w", fam.name, err)
	}
	for _, h := range policy.Hooks(fam.f) {
		listed, err := fam.ipt.List("filter", h)
		if err != nil {
			return fmt.Errorf("failed to list %s %s: %w", fam.name, h, err)
		}
		if err := checkJump(h, chain, listed); err != nil {
			return fmt.Errorf("%s: %w", fam.name, err)
		}
	}
	return nil
}

// remove deletes chain and every jump to it; nothing to do is success.
func (fam *family) remove(chain string) error {
	exists, err := fam.ipt.ChainExists("filter", chain)
	if err != nil {
		return fmt.Errorf("failed to look for %s chain %s: %w", fam.name, chain, err)
	}
	if !exists {
		return nil // nothing can jump to a chain that does not exist
	}
	jumps, err := fam.jumps(chain)
	if err != nil {
		return err
	}
	var from []string
	for _, h := range policy.Hooks(fam.f) {
		for range jumps[h] {
			from = append(from, h)
		}
	}
	return fam.run(policy.RestoreRemove(chain, from))
}

// run loads one payload with a single iptables-restore transaction.
func (fam *family) run(payload string) error {
	ctx, cancel := context.WithTimeout(context.Background(), fam.timeout)
	defer cancel()
	secs := max(1, int(fam.timeout/time.Second)-1)
	cmd := exec.CommandContext(ctx, fam.restore, "--noflush", "--wait="+strconv.Itoa(secs))
	cmd.Stdin = strings.NewReader(payload)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return &RestoreError{Binary: fam.restore, Output: out.String(), Err: err}
	}
	return nil
}

// RestoreError reports a failed iptables-restore transaction, which
// changed nothing.
type RestoreError struct {
	Binary string
	Output string
	Err    error
}

func (e *RestoreError) Error() string {
	// One line, since the hook prints errors as a single line, without
	// iptables' "Try `iptables-restore -h'" advice, which does not apply.
	var lines []string
	for _, l := range strings.Split(e.Output, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "Try `") {
			lines = append(lines, l)
		}
	}
	out := strings.Join(lines, "; ")
	if out == "" {
		return fmt.Sprintf("%s failed: %v", e.Binary, e.Err)
	}
	return fmt.Sprintf("%s failed: %v: %s", e.Binary, e.Err, out)
}

func (e *RestoreError) Unwrap() error { return e.Err }

// Refused implements engine.Engine with totals only: iptables keeps one
// counter per rule, so the packets of the chain's refusing rules (DROP and
// REJECT) are counted, not their destinations.
func (e *Engine) Refused(t engine.Target) (engine.Refused, error) {
	chain, err := policy.ChainName(t.ID)
	if err != nil {
		return engine.Refused{}, fmt.Errorf("failed to name the chain: %w", err)
	}
	var r engine.Refused
	var digest []string
	err = engine.WithNetNS(t.NetNS, func() error {
		tables, b, err := e.backendHere()
		if err != nil {
			return err
		}
		found := false
		for _, f := range families {
			if !tables.hasFilter(b, f) {
				continue
			}
			fam, err := e.family(b, f)
			if err != nil {
				return err
			}
			ok, err := fam.ipt.ChainExists("filter", chain)
			if err != nil {
				return fmt.Errorf("failed to look for %s chain %s: %w", fam.name, chain, err)
			}
			if !ok {
				continue
			}
			found = true
			listed, err := fam.ipt.ListWithCounters("filter", chain)
			if err != nil {
				return fmt.Errorf("failed to list %s chain %s: %w", fam.name, chain, err)
			}
			n, err := refusedPackets(chain, listed)
			if err != nil {
				return fmt.Errorf("%s: %w", fam.name, err)
			}
			r.Total += n
			digest = append(digest, digestLines(f, chainRules(chain, listed))...)
		}
		if !slices.Contains(digest, "family "+string(policy.IPv6)) {
			digest = append(digest, "family "+string(policy.IPv6)+" disabled")
		}
		if !found {
			return fmt.Errorf("%w: no chain %s (iptables-%s)", engine.ErrNotInstalled, chain, b)
		}
		return nil
	})
	r.Uncounted = r.Total
	if err == nil {
		r.Ruleset = sum(digest)
	}
	return r, err
}

// backendHere reads the tables of the calling thread's namespace (call it
// inside engine.WithNetNS) and chooses the backend there.
func (e *Engine) backendHere() (nsTables, Backend, error) {
	tables, err := readTables()
	if err != nil {
		return tables, "", err
	}
	b, err := e.chooseBackend(tables)
	return tables, b, err
}
