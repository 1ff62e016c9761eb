// Package shim is sforge-runtime, a runc wrapper in the manner of
// nvidia-container-runtime: on `create` and `run` it reads the bundle's
// config.json and, when the container asks for isolation (the
// sforge.io/egress annotation or its SFORGE_EGRESS environment form), adds
// the sforge hooks and drops CAP_NET_RAW, then execs the real runtime with
// the command line unchanged. Every other subcommand execs straight
// through. It never writes to stdout.
package shim

import (
	"fmt"
	"os"
	"strings"

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

// Shim patches specs and hands over to the runtime.
type Shim struct {
	Runtime     Runtime
	Hook        string // path of sforge-hook
	HookTimeout int    // seconds
	Log         *Logger
	// Getwd is the working directory (the default bundle); os.Getwd when nil.
	Getwd func() (string, error)
	// HostNetNS is the path of the shim's own network namespace, which a
	// container must not share; /proc/self/ns/net when empty.
	HostNetNS string
}

// Run handles one invocation (args without argv[0]). It returns only on
// error: on success Runtime.Exec replaces the process.
func (s *Shim) Run(args []string) error {
	a, err := ParseArgs(args)
	if err != nil {
		return fmt.Errorf("failed to parse the runc command line: %w", err)
	}
	if a.Modifies() {
		if err := s.prepare(a); err != nil {
			return err
		}
	}
	return s.Runtime.Exec(args)
}

// prepare patches the bundle of a create/run when isolation is asked for.
func (s *Shim) prepare(a Args) error {
	bundle := a.Bundle
	if bundle == "" {
		getwd := s.Getwd
		if getwd == nil {
			getwd = os.Getwd
		}
		wd, err := getwd()
		if err != nil {
			return fmt.Errorf("failed to find the bundle (the working directory): %w", err)
		}
		bundle = wd
	}
	spec, err := LoadSpec(bundle)
	if err != nil {
		return err
	}
	value, found, err := policy.Lookup(spec.Annotations(), spec.Env())
	if err != nil {
		return &RefusedError{ID: a.ID, Cause: err.Error(), Fix: "set the allowlist once"}
	}
	if !found {
		return nil
	}
	allow, err := policy.Decode(value)
	if err != nil {
		return &RefusedError{ID: a.ID, Cause: err.Error(), Fix: "fix the allowlist (`sforge policy annotation` prints a valid one)"}
	}
	if err := s.Isolate(a.ID, spec); err != nil {
		return err
	}
	if err := spec.Flush(); err != nil {
		return fmt.Errorf("container %s: %w", a.ID, err)
	}
	if s.Log != nil {
		s.Log.Infof("container %s: isolation hooks added (%d endpoints, %d resolvers), %s dropped", a.ID, len(allow.Endpoints), len(allow.DNS), dropCapability)
	}
	return nil
}

// Isolate checks that the spec can be isolated and patches it: it refuses
// the host's network namespace and the capabilities that undo the rules,
// drops CAP_NET_RAW and adds the createRuntime and poststop hooks. The hook
// repeats the refusals when it runs; checking here as well fails such a
// container before runc creates anything.
func (s *Shim) Isolate(id string, spec *Spec) error {
	if err := s.refuse(id, spec); err != nil {
		return err
	}
	if _, err := spec.DropCapability(dropCapability); err != nil {
		return fmt.Errorf("container %s: failed to drop %s: %w", id, dropCapability, err)
	}
	st, err := os.Stat(s.Hook)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return &RefusedError{ID: id, Cause: fmt.Sprintf("the sforge hook %s is missing or not executable", s.Hook),
			Fix: "reinstall sforge (install.sh) or set \"hook\" in " + DefaultConfigPath}
	}
	timeout := s.HookTimeout
	if timeout <= 0 {
		timeout = DefaultHookTimeout
	}
	for _, stage := range []string{StageCreateRuntime, StagePoststop} {
		h := Hook{Path: s.Hook, Args: []string{HookName, stage}, Timeout: &timeout}
		if _, err := spec.AddHook(stage, h); err != nil {
			return fmt.Errorf("container %s: failed to add the %s hook: %w", id, stage, err)
		}
	}
	return nil
}

func (s *Shim) refuse(id string, spec *Spec) error {
	found, path, err := spec.NetworkNamespace()
	if err != nil {
		return fmt.Errorf("container %s: failed to read the spec: %w", id, err)
	}
	hostNS := s.HostNetNS
	if hostNS == "" {
		hostNS = "/proc/self/ns/net"
	}
	if !found || (path != "" && same(path, hostNS)) {
		return &RefusedError{ID: id, Cause: "it would use the host's network namespace, which sforge cannot isolate",
			Fix: "give it its own network (no --network host)"}
	}
	for _, set := range capabilitySets {
		caps, err := spec.Capabilities(set)
		if err != nil {
			return fmt.Errorf("container %s: failed to read the spec: %w", id, err)
		}
		for _, c := range caps {
			for _, bad := range refuseCapabilities {
				if c == bad {
					return &RefusedError{ID: id,
						Cause: fmt.Sprintf("it holds %s (%s set), which would let it remove its network rules", c, set),
						Fix:   fmt.Sprintf("drop it (no --privileged, no --cap-add %s)", strings.TrimPrefix(c, "CAP_"))}
				}
			}
		}
	}
	return nil
}

// Main is sforge-runtime's entry point; it returns the exit code when the
// runtime could not be exec'd.
func Main(args []string) int {
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
	s := &Shim{Runtime: NewExecRuntime(cfg.Runtime), Hook: cfg.Hook, HookTimeout: cfg.HookTimeout, Log: log}
	if err := s.Run(args); err != nil {
		log.Errorf("%v", err)
		return 1
	}
	return 0 // only reachable with a Runtime whose Exec returns
}
