// Package shim is sforge-runtime, a runc wrapper in the manner of
// nvidia-container-runtime. On `create` and `run` it reads the bundle's
// config.json (a spec that does not mention sforge goes to runc unparsed);
// when the container asks for isolation (the sforge.io/egress annotation
// or its SFORGE_EGRESS environment form) it refuses what cannot be
// isolated and drops CAP_NET_RAW, then installs the rules in one of three
// ways:
//
//   - a network namespace of the container's own (Docker's and
//     containerd's default; create and run): the shim makes the
//     namespace, installs and verifies the rules in it, names it in
//     config.json by a descriptor it holds, and execs runc, which joins
//     it. The container's process is born into a namespace that already
//     has its rules, and no sforge process runs at creation or at stop
//     (preisolate.go);
//   - a namespace given by path (another container's, a pod's), or a
//     container with a user namespace (create): the shim runs `runc
//     create` as its child with the command line unchanged and installs
//     the rules in the container's namespace while runc holds its process
//     before `start`; only then does it exit 0. If that fails the container
//     is deleted and the create fails (create.go);
//   - the same with `run`, or a create with socket-activation descriptors
//     (runc must keep its pid): it adds sforge-hook as a createRuntime
//     hook and execs runc.
//
// sforge-runtime's C front (package shim/front) takes the commonest case
// before the Go runtime starts: the create of a container with a namespace
// of its own whose spec it reads without doubt. It does it the second way
// (CAP_NET_RAW dropped, runc create, then the rules) with the C nftables
// engine, and hands the created container to the shim when its engine did
// not install (Shim.Created, adopt).
//
// A namespace given by path outlives the container, so its rules must be
// removed when it is deleted: the shim adds sforge-hook as a poststop hook
// for those. A private namespace takes its rules with it. Every other
// subcommand execs straight through. The shim never writes to stdout.
package shim

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/sforge-dev/netiso/engine"
	"github.com/sforge-dev/netiso/engine/engines"
	"github.com/sforge-dev/netiso/engine/priority"
	"github.com/sforge-dev/netiso/policy"
)

// Hook stages the shim adds, named as in the runtime-spec.
const (
	StageCreateRuntime = "createRuntime"
	StagePoststop      = "poststop"
)

// Capabilities that would let the container undo or bypass its rules.
// NET_RAW is dropped rather than refused: Docker grants it by default, and
// nobody who asked for isolation needs raw sockets.
var (
	dropCapability     = "CAP_NET_RAW"
	refuseCapabilities = []string{"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}
)

// RefusedError is a container the shim will not start: isolation was asked
// for and cannot be guaranteed. Its message names the cause and the fix.
type RefusedError struct {
	ID    string
	Cause string
	Fix   string
}

func (e *RefusedError) Error() string {
	id := e.ID
	if id == "" {
		id = "?"
	}
	return fmt.Sprintf("container %s refused: %s; %s", id, e.Cause, e.Fix)
}

// ExitStatus is the runtime's own failure, passed through: runc already
// said why (on stderr and in its --log file), so the shim exits with the
// same status and adds nothing.
type ExitStatus int

func (e ExitStatus) Error() string { return fmt.Sprintf("the runtime exited with status %d", int(e)) }

// Shim patches specs, installs rules and hands over to the runtime.
type Shim struct {
	Runtime     Runtime
	Hook        string // path of sforge-hook
	HookTimeout int    // seconds
	// EngineName is the rule engine (engines.Names); it is passed to the
	// hooks the shim adds unless it is auto.
	EngineName string
	// Engine installs the rules on the create path; opened from
	// EngineName the first time it is needed when nil.
	Engine engine.Engine
	// InstallPriority (priority.Names) is passed to the hooks the shim
	// adds unless it is the default.
	InstallPriority string
	Log             *Logger
	// Getwd is the working directory (the default bundle); os.Getwd when nil.
	Getwd func() (string, error)
	// Getenv reads the environment; os.Getenv when nil.
	Getenv func(string) string
	// HostNetNS are the network namespaces a container must not share;
	// nil means init's and the shim's own.
	HostNetNS []string
	// NoMadeNetNS turns off making private network namespaces (the tests
	// of the create-then-install path use it).
	NoMadeNetNS bool
	// Created means that sforge-runtime's C front has run `runc create`
	// already (front.Created) and left the rest to the shim: see adopt.
	Created bool
	// FrontLeft is why the C front left this isolated create to the shim
	// (front.Left), logged with it: " front=go: <why>".
	FrontLeft string
}

// frontNote is what the isolated create's log line says of the C front
// when the Go shim did the create.
func (s *Shim) frontNote() string {
	if s.FrontLeft == "" {
		return ""
	}
	return " front=go: " + s.FrontLeft
}

// Run handles one invocation (args without argv[0]). It returns nil when
// the shim did the work itself (an isolated create) and an error
// otherwise; when it execs the runtime it does not return at all.
func (s *Shim) Run(args []string) error {
	a, err := ParseArgs(args)
	if err != nil {
		return fmt.Errorf("failed to parse the runc command line: %w", err)
	}
	if a.Restores() {
		if err := s.refuseIsolatedRestore(a); err != nil {
			return err
		}
		return s.Runtime.Exec(args)
	}
	if s.Created {
		return s.adopt(a, args)
	}
	if !a.Modifies() {
		return s.Runtime.Exec(args)
	}
	begin := time.Now()
	p, err := s.prepare(a)
	if err != nil {
		return err
	}
	if p == nil {
		return s.Runtime.Exec(args)
	}
	p.prepared = time.Since(begin)
	switch p.mode {
	case modeMadeNetNS:
		if err := s.preisolate(a, p); err != nil {
			return err
		}
		return s.Runtime.Exec(args)
	case modeAfterCreate:
		return s.create(a, args, p)
	}
	return s.Runtime.Exec(args)
}

// plan is what prepare decided for an isolated container.
type plan struct {
	allow policy.Allowlist
	// netnsPath is the spec's network namespace path, "" for a private
	// namespace.
	netnsPath string
	// mode is who installs the rules, and when.
	mode isolationMode
	// spec is the patched config.json, written back already unless mode is
	// modeMadeNetNS (which names the namespace in it first).
	spec *Spec
	// engine installs the rules when the shim does (every mode but
	// modeHook).
	engine engine.Engine
	// netns is the namespace being made for modeMadeNetNS.
	netns *madeNetNS
	// prepared is the time spent reading and patching config.json (logged).
	prepared time.Duration
}

// isolationMode is how a container's rules get installed.
type isolationMode int

const (
	// modeMadeNetNS: the shim makes the network namespace, installs the
	// rules in it and execs runc, which joins it (private namespace, no
	// user namespace; create and run). See preisolate.go.
	modeMadeNetNS isolationMode = iota
	// modeAfterCreate: the shim runs `runc create` as its child and
	// installs the rules in the namespace runc made or joined, before
	// returning (create of a namespace given by path, or inside a user
	// namespace). See create.go.
	modeAfterCreate
	// modeHook: the createRuntime hook installs them (run, and a create
	// with socket-activation descriptors, where runc must keep its pid).
	modeHook
)

func (s *Shim) getenv(k string) string {
	if s.Getenv != nil {
		return s.Getenv(k)
	}
	return os.Getenv(k)
}

func (s *Shim) hostNetNS() []string {
	if s.HostNetNS != nil {
		return s.HostNetNS
	}
	// The calling thread's, not /proc/self/ns/net: that names the
	// namespace of the process's first thread, which may be the one making
	// the container's namespace (makeNetNS) while the spec is checked. A
	// thread in that namespace is locked to the goroutine making it, so
	// every other goroutine runs on a thread in the shim's own.
	return []string{"/proc/1/ns/net", "/proc/thread-self/ns/net"}
}

// refuseIsolatedRestore refuses `runc restore` of a bundle that asks for
// isolation: a checkpoint holds the container's processes, not rules the
// shim can vouch for, and the namespace the spec names may be gone (or, for
// a namespace the shim made, a path that now means another process's
// descriptor). The container would start without verified rules.
func (s *Shim) refuseIsolatedRestore(a Args) error {
	bundle, err := s.bundleDir(a)
	if err != nil {
		return err
	}
	raw, err := ReadRawSpec(bundle)
	if err != nil {
		return err
	}
	if !raw.MentionsSforge() {
		return nil
	}
	return &RefusedError{ID: a.ID,
		Cause: "restoring a checkpoint of a container with a network allowlist is not supported (the checkpoint carries no rules the shim can verify)",
		Fix:   "create the container afresh instead of restoring it (docker start without --checkpoint)"}
}

// bundleDir is the bundle of a create, run or restore: --bundle, else the
// working directory.
func (s *Shim) bundleDir(a Args) (string, error) {
	if a.Bundle != "" {
		return a.Bundle, nil
	}
	getwd := s.Getwd
	if getwd == nil {
		getwd = os.Getwd
	}
	wd, err := getwd()
	if err != nil {
		return "", fmt.Errorf("failed to find the bundle (the working directory): %w", err)
	}
	return wd, nil
}

// prepare reads the bundle of a create/run. Without an allowlist it
// returns nil and changes nothing (but a namespace path left by an earlier
// create of the bundle, see preisolate.go). With one, it refuses what
// cannot be isolated, drops CAP_NET_RAW, chooses the mode, adds the hooks
// that mode needs and writes config.json back; for modeMadeNetNS it starts
// making the namespace and leaves the writing to preisolate.
func (s *Shim) prepare(a Args) (*plan, error) {
	bundle, err := s.bundleDir(a)
	if err != nil {
		return nil, err
	}
	raw, err := ReadRawSpec(bundle)
	if err != nil {
		return nil, err
	}
	if !raw.MentionsSforge() {
		return nil, nil
	}
	// The shim does one thing at a time from here on: with a single P the
	// Go runtime does not keep a second thread spinning for work each time
	// a goroutine wakes, CPU that the install needs on a busy host (the
	// install took 1.6-1.7 ms with it, 1.8-2.2 ms without, in a namespace
	// made by the shim; 1.39 against 1.56 ms after runc create). System
	// calls, the namespace's included, still run beside it.
	runtime.GOMAXPROCS(1)
	var netns *madeNetNS
	if !s.NoMadeNetNS {
		// Most containers that mention sforge get a namespace made by the
		// shim (modeMadeNetNS): start making it now, while the spec is
		// parsed and checked. The others discard it.
		netns = makeNetNS(s.minNetNSFD(a))
	}
	p, err := s.decide(a, raw)
	if err != nil || p == nil || p.mode != modeMadeNetNS {
		netns.discard()
		return p, err
	}
	p.netns = netns
	return p, nil
}

// decide parses and checks the spec of a container that mentions sforge
// and patches it: nil when it asks for no isolation, a RefusedError when it
// cannot be isolated. The spec is written back unless the mode is
// modeMadeNetNS.
func (s *Shim) decide(a Args, raw RawSpec) (*plan, error) {
	spec, err := raw.Parse()
	if err != nil {
		return nil, err
	}
	if err := forgetPreisolated(spec); err != nil {
		return nil, fmt.Errorf("container %s: failed to read the spec: %w", a.ID, err)
	}
	value, found, err := policy.Lookup(spec.Annotations(), spec.Env())
	if err != nil {
		return nil, &RefusedError{ID: a.ID, Cause: err.Error(), Fix: "set the allowlist once"}
	}
	if !found {
		// No isolation asked for; but a namespace path an earlier create
		// of this bundle wrote must not reach runc (the descriptor it
		// names is gone, or another process's).
		if err := spec.Flush(); err != nil {
			return nil, fmt.Errorf("container %s: %w", a.ID, err)
		}
		return nil, nil
	}
	allow, err := policy.Decode(value)
	if err != nil {
		return nil, &RefusedError{ID: a.ID, Cause: err.Error(), Fix: "fix the allowlist (`sforge policy annotation` prints a valid one)"}
	}
	p := &plan{allow: allow, spec: spec}
	if p.mode, err = s.chooseMode(a, spec); err != nil {
		return nil, err
	}
	if p.netnsPath, err = s.Isolate(a.ID, spec, p.mode == modeHook); err != nil {
		return nil, err
	}
	if p.mode != modeHook {
		// Choosing the engine can fail (no nftables, no iptables): find
		// out before anything is created.
		if p.engine, err = s.engine(); err != nil {
			return nil, &RefusedError{ID: a.ID, Cause: "no rule engine: " + err.Error(),
				Fix: fmt.Sprintf("force one with \"engine\" in %s or $%s", DefaultConfigPath, engines.EnvVar)}
		}
	}
	if p.mode == modeMadeNetNS {
		return p, nil // preisolate writes the spec once it names the namespace
	}
	if err := spec.Flush(); err != nil {
		return nil, fmt.Errorf("container %s: %w", a.ID, err)
	}
	if s.Log != nil && p.mode == modeHook {
		s.Log.Infof("container %s: isolation hooks added (%d endpoints, %d resolvers), %s dropped", a.ID, len(allow.Endpoints), len(allow.DNS), dropCapability)
	}
	return p, nil
}

// chooseMode picks how the container's rules get installed.
func (s *Shim) chooseMode(a Args, spec *Spec) (isolationMode, error) {
	found, path, err := spec.NetworkNamespace()
	if err != nil {
		return 0, fmt.Errorf("container %s: failed to read the spec: %w", a.ID, err)
	}
	userNS, err := spec.HasNamespace("user")
	if err != nil {
		return 0, fmt.Errorf("container %s: failed to read the spec: %w", a.ID, err)
	}
	switch {
	case found && path == "" && !userNS && !s.NoMadeNetNS:
		return modeMadeNetNS, nil
	// runc hands socket-activation descriptors (LISTEN_FDS) to the
	// container only when LISTEN_PID is its own pid, which a child of the
	// shim's is not: such a create keeps runc's pid and the hook.
	case a.Command == "create" && s.getenv("LISTEN_FDS") == "":
		return modeAfterCreate, nil
	}
	return modeHook, nil
}

// Isolate checks that the spec can be isolated and patches it: it refuses
// the host's network namespace and the capabilities that undo the rules
// and drops CAP_NET_RAW. It adds the createRuntime hook when withHook (the
// hook installs the rules), and the poststop hook when the network
// namespace is given by path (the rules must go when the container does;
// a private namespace takes them with it). It returns that path.
func (s *Shim) Isolate(id string, spec *Spec, withHook bool) (string, error) {
	netnsPath, err := s.refuse(id, spec)
	if err != nil {
		return "", err
	}
	if _, err := spec.DropCapability(dropCapability); err != nil {
		return "", fmt.Errorf("container %s: failed to drop %s: %w", id, dropCapability, err)
	}
	var stages []string
	if withHook {
		stages = append(stages, StageCreateRuntime)
	}
	if netnsPath != "" {
		stages = append(stages, StagePoststop)
	}
	if len(stages) == 0 {
		return netnsPath, nil
	}
	st, err := os.Stat(s.Hook)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", &RefusedError{ID: id, Cause: fmt.Sprintf("the sforge hook %s is missing or not executable", s.Hook),
			Fix: "reinstall sforge (install.sh) or set \"hook\" in " + DefaultConfigPath}
	}
	timeout := s.HookTimeout
	if timeout <= 0 {
		timeout = DefaultHookTimeout
	}
	for _, stage := range stages {
		args := []string{HookName, stage}
		if s.EngineName != "" && s.EngineName != engines.Auto {
			args = append(args, "--engine", s.EngineName)
		}
		h := Hook{Path: s.Hook, Args: args, Timeout: &timeout, Env: []string{HookProcsEnv}}
		// runc gives a hook only the environment its entry names: pass
		// the hook's log setting on, when the shim has one.
		if v := s.getenv(HookLogEnv); v != "" {
			h.Env = append(h.Env, HookLogEnv+"="+v)
		}
		// The install priority, where the hook installs: a poststop
		// removes, and its entry stays the one the C front writes.
		if stage == StageCreateRuntime && s.InstallPriority != "" && s.InstallPriority != priority.Realtime {
			h.Env = append(h.Env, priority.EnvVar+"="+s.InstallPriority)
		}
		if _, err := spec.AddHook(stage, h); err != nil {
			return "", fmt.Errorf("container %s: failed to add the %s hook: %w", id, stage, err)
		}
	}
	return netnsPath, nil
}

// refuse returns a RefusedError for a spec that cannot be isolated, else
// the path of its network namespace ("" for a private one).
func (s *Shim) refuse(id string, spec *Spec) (string, error) {
	found, path, err := spec.NetworkNamespace()
	if err != nil {
		return "", fmt.Errorf("container %s: failed to read the spec: %w", id, err)
	}
	hostNS := false
	for _, h := range s.hostNetNS() {
		hostNS = hostNS || (path != "" && same(path, h))
	}
	if !found || hostNS {
		return "", &RefusedError{ID: id, Cause: "it would use the host's network namespace, which sforge cannot isolate",
			Fix: "give it its own network (no --network host)"}
	}
	has, err := spec.HasCapabilities()
	if err != nil {
		return "", fmt.Errorf("container %s: failed to read the spec: %w", id, err)
	}
	if !has {
		// runc leaves such a process every capability it has itself.
		return "", &RefusedError{ID: id, Cause: "its spec lists no capabilities, so the process would keep all of the runtime's (CAP_NET_ADMIN included)",
			Fix: "list the container's capabilities explicitly"}
	}
	for _, set := range capabilitySets {
		caps, err := spec.Capabilities(set)
		if err != nil {
			return "", fmt.Errorf("container %s: failed to read the spec: %w", id, err)
		}
		for _, c := range caps {
			for _, bad := range refuseCapabilities {
				if canonicalCap(c) == bad {
					return "", &RefusedError{ID: id,
						Cause: fmt.Sprintf("it holds %s (%s set), which would let it remove its network rules", bad, set),
						Fix:   fmt.Sprintf("drop it (no --privileged, no --cap-add %s)", strings.TrimPrefix(bad, "CAP_"))}
				}
			}
		}
	}
	return path, nil
}

// canonicalCap accepts the spellings runtimes and users write: "NET_RAW",
// "net_raw", "CAP_NET_RAW". Matching loosely can only refuse (or drop)
// more.
func canonicalCap(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	if !strings.HasPrefix(c, "CAP_") {
		c = "CAP_" + c
	}
	return c
}

// Main is sforge-runtime's entry point. It returns the exit code when the
// runtime was not exec'd. created is front.Created(): the C front has run
// `runc create` for this command line already (see Shim.Created).
func Main(args []string, f FrontReport) int {
	return run(args, mainOptions{created: f.Created, frontLeft: f.Left})
}

// FrontReport is what sforge-runtime's C front (shim/front) tells the Go
// shim when it lets it run.
type FrontReport struct {
	// Created: the front ran `runc create` for an isolated container and
	// left the rest to the shim (Shim.Created).
	Created bool
	// Left: why the front left an isolated create to the shim, "" when
	// it made no such decision (Shim.FrontLeft).
	Left string
}

// mainOptions are seams for the package's tests.
type mainOptions struct {
	engine      engine.Engine
	hostNetNS   []string
	noMadeNetNS bool
	created     bool
	frontLeft   string
}

func run(args []string, o mainOptions) int {
	log := &Logger{Stderr: os.Stderr}
	// Log to runc's --log file even when the rest fails.
	if a, err := ParseArgs(args); err == nil {
		log.RuncLog, log.RuncLogFormat = a.LogFile, a.LogFormat
	}
	self, err := os.Executable()
	if err != nil {
		log.Errorf("failed to find its own executable: %v", err)
		return 1
	}
	cfg, err := LoadConfig("", self, os.Getenv)
	log.File = cfg.Log
	if err != nil {
		log.Errorf("%v", err)
		return 1
	}
	s := &Shim{Runtime: NewExecRuntime(cfg.Runtime), Hook: cfg.Hook, HookTimeout: cfg.HookTimeout,
		EngineName: cfg.Engine, Engine: o.engine, InstallPriority: cfg.InstallPriority, HostNetNS: o.hostNetNS, NoMadeNetNS: o.noMadeNetNS, Created: o.created, FrontLeft: o.frontLeft, Log: log}
	err = s.Run(args)
	var status ExitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &status):
		return int(status)
	}
	log.Errorf("%s", oneLine(err.Error()))
	return 1
}

// oneLine joins the lines of a message (errors.Join output, say): the
// engine that called runc shows one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}
