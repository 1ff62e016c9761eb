// Package hook is the OCI hook behind cmd/sforge-hook: it reads the OCI
// state, loads the bundle's config.json, decodes the allowlist and installs
// (createRuntime/prestart) or removes (poststop) the container's chain in
// its network namespace, failing closed.
//
// The hook sits on every container start, so it stays small: no flag
// library, no Kubernetes or Docker client, nothing written to stdout (a
// runtime may read it), stderr only on failure, one log line per action.
package hook

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/engine/iptables"
	"github.com/sforge-dev/netiso/engine/nftables"
	"github.com/sforge-dev/netiso/policy"
)

// BeforeInstall, when set, runs just before the rules of an isolated
// container go in, and only then. cmd/sforge-hook sets it to run the rest
// of the hook with one P: what that costs (the Go runtime stops the world
// to change it, about 0.1 ms of a fresh process here) is then not paid by
// the runs that have nothing to do (poststop of a private namespace, a
// container without an allowlist).
var BeforeInstall func()

// FrontLeft, when set, tells why cmd/sforge-hook's C front left this
// install to Go (hook/front.Left); the install's log line then ends in
// " front=go: <why>", so that a user can see why a start took the slower
// path.
var FrontLeft func() string

// Main runs the hook with the process's arguments (program name first) and
// returns the exit status. Failures are one line on stderr.
func Main(args []string, stdin io.Reader, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 2 && args[1] == HoldStage {
		hold(stdin)
		return 0
	}
	opts, err := ParseArgs(args[1:], getenv)
	log := &Logger{Path: opts.LogPath}
	if err != nil {
		log.Printf("error: %v", err)
		if opts.Stage == StagePoststop {
			return 0 // poststop never fails a container's deletion
		}
		fmt.Fprintf(stderr, "sforge-hook: %v; %s\n", err, Usage)
		return 2
	}
	h := &Hook{EngineName: opts.Engine, Log: log}
	if err := h.Run(opts.Stage, stdin); err != nil {
		fmt.Fprintln(stderr, "sforge-hook: "+oneLine(err.Error()))
		return 1
	}
	return 0
}

// Hook runs stages for containers.
type Hook struct {
	// Engine applies the rules; when nil, the engine named EngineName
	// (see engines.Names) is opened the first time there is work, so that
	// a container without an allowlist costs no kernel probe.
	Engine     engine.Engine
	EngineName string
	Log        *Logger
	// HostNetNS are the namespaces a container must not share; nil means
	// init's and the hook's own.
	HostNetNS []string
}

// Refusal is a reason not to start a container, printed as
// "container <id>: <cause>; <fix>".
type Refusal struct {
	ID    string
	Cause string
	Fix   string
}

func (r *Refusal) Error() string {
	if r.ID == "" {
		return r.Cause + "; " + r.Fix
	}
	return fmt.Sprintf("container %s: %s; %s", r.ID, r.Cause, r.Fix)
}

// Run executes stage for the container whose OCI state is on stdin. At
// createRuntime and prestart an error means the container must not start.
// poststop never returns an error: its problems go to the log.
func (h *Hook) Run(stage string, stdin io.Reader) error {
	st, err := ReadState(stdin)
	if stage == StagePoststop {
		if err != nil {
			h.Log.Printf("poststop error: %v", err)
			return nil
		}
		h.poststop(st)
		return nil
	}
	if err != nil {
		r := &Refusal{Cause: err.Error(), Fix: "the runtime must pass the OCI state on stdin"}
		h.Log.Printf("refuse stage=%s: %v", stage, r)
		return r
	}
	if err := h.install(stage, st); err != nil {
		h.Log.Printf("refuse stage=%s %v", stage, err)
		return err
	}
	return nil
}

// engine opens the engine, where there is none yet; auto chooses by a
// probe of the kernel in netns, the container's network namespace.
func (h *Hook) engine(netns string) (engine.Engine, error) {
	if h.Engine == nil {
		e, err := engines.Open(engines.Options{Name: h.EngineName, ProbeNetNS: netns})
		if err != nil {
			return nil, err
		}
		h.Engine = e
	}
	return h.Engine, nil
}

func (h *Hook) hostNetNS() []string {
	if h.HostNetNS != nil {
		return h.HostNetNS
	}
	return hostNetNS
}

// install is also made in C, before Go starts, by cmd/sforge-hook's front
// (hook/front: sforge_hook_front_decide up to the engine, then the C
// engine of internal/cfront/nft.h); whatever changes here must change
// there (hook/front's TestDecide and FuzzDecide compare the two).
func (h *Hook) install(stage string, st *specs.State) error {
	refuse := func(cause, fix string) error { return &Refusal{ID: st.ID, Cause: cause, Fix: fix} }
	spec, err := LoadSpec(st.Bundle)
	if err != nil {
		// Whether isolation was asked for is unknown: fail closed.
		return refuse(err.Error(), "the runtime must pass a bundle with a valid config.json")
	}
	value, found, err := policy.Lookup(spec.Annotations, processEnv(spec))
	if err != nil {
		return refuse(err.Error(), "remove the duplicate from the container's environment")
	}
	if !found {
		return nil // not isolated: touch nothing
	}
	a, err := policy.Decode(value)
	if err != nil {
		return refuse(err.Error(), "fix the value (`sforge policy annotation` prints a valid one)")
	}
	if st.Pid <= 0 {
		return refuse("the OCI state has no pid", "run sforge-hook at createRuntime or prestart, when the container's process exists")
	}
	if netNamespace(spec) == nil {
		return refuse("config.json has no network namespace, so the container would use the host's network",
			"give the container a network of its own (not --network host)")
	}
	if cause, fix := checkCaps(spec); cause != "" {
		return refuse(cause, fix)
	}
	nsPath := fmt.Sprintf("/proc/%d/ns/net", st.Pid)
	shared, err := sharesNetNS(nsPath, h.hostNetNS())
	if err != nil {
		return refuse(err.Error(), "run sforge-hook at createRuntime or prestart, when the container's process exists")
	}
	if shared {
		return refuse("the container's network namespace is the host's (--network host)",
			"give the container a network of its own (not --network host)")
	}
	if BeforeInstall != nil {
		BeforeInstall()
	}
	eng, err := h.engine(nsPath)
	if err != nil {
		return refuse("no rule engine: "+err.Error(), "force one with --engine or "+engines.EnvVar)
	}
	rep, err := eng.Install(engine.Target{NetNS: nsPath, ID: st.ID}, a)
	if err != nil {
		return refuse("failed to install the egress rules: "+err.Error(), installFix(err))
	}
	note := ""
	if FrontLeft != nil {
		if why := FrontLeft(); why != "" {
			note = " front=go: " + why
		}
	}
	h.Log.Printf("install container=%s stage=%s engine=%s chain=%s rules=%d ipv6=%s duration=%s%s",
		st.ID, stage, rep.Engine, rep.Chain, rep.Rules, rep.IPv6, rep.Duration.Round(time.Microsecond), note)
	return nil
}

func installFix(err error) string {
	var nf *iptables.NotFoundError
	switch {
	case errors.As(err, &nf):
		return "or put it on the hook's PATH"
	case errors.Is(err, engine.ErrNetNSGone):
		return "the container's process exited before its rules were in place; start it again"
	}
	return "the container was not started; check that iptables works on this host (iptables -S)"
}

// poststop removes the container's chain when its network namespace
// outlives it: a bind-mounted namespace, or another container's that it
// joined. A private namespace without a path died with the container and
// took the rules with it, so there is nothing to do and nothing is run;
// cmd/sforge-hook's C front (hook/front) decides that case the same way
// before Go starts, and whatever it changes here it must change too
// (its tests compare the two).
func (h *Hook) poststop(st *specs.State) {
	spec, err := LoadSpec(st.Bundle)
	if err != nil {
		h.Log.Printf("poststop container=%s error: %v", st.ID, err)
		return
	}
	// The namespace first: it is the cheapest test and the usual answer
	// (a private namespace, or a bind mount already removed).
	n := netNamespace(spec)
	if n == nil || n.Path == "" || !pathExists(n.Path) {
		return
	}
	value, found, err := policy.Lookup(spec.Annotations, processEnv(spec))
	if err != nil || !found {
		return
	}
	if _, err := policy.Decode(value); err != nil {
		return // refused at start: nothing was installed
	}
	if shared, err := sharesNetNS(n.Path, h.hostNetNS()); err != nil || shared {
		// Never touch the host's rules; nothing of ours can be there,
		// since such a container was refused at start.
		return
	}
	start := time.Now()
	opened := h.Engine == nil // ours to configure
	eng, err := h.engine(n.Path)
	if err != nil {
		h.Log.Printf("remove container=%s error: %v", st.ID, err)
		return
	}
	handedOff := false
	if e, ok := eng.(*nftables.Engine); ok && opened {
		e.HandOff = func(sock *os.File) error {
			err := holdNetlink(sock)
			handedOff = err == nil
			if err != nil {
				h.Log.Printf("remove container=%s: no holder for the netlink socket (%v); waiting for the kernel here", st.ID, err)
			}
			return err
		}
	}
	err = eng.Remove(engine.Target{NetNS: n.Path, ID: st.ID})
	result := "ok"
	switch {
	case errors.Is(err, engine.ErrNetNSGone):
		result = "netns gone"
	case err != nil:
		result = "error: " + err.Error()
	}
	socket := ""
	if handedOff {
		socket = " socket=handed-off"
	}
	h.Log.Printf("remove container=%s engine=%s netns=%s duration=%s result=%s%s",
		st.ID, eng.Name(), n.Path, time.Since(start).Round(time.Microsecond), result, socket)
}

// oneLine joins the lines of a message (errors.Join output, say) so that
// the runtime shows the whole refusal on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}
