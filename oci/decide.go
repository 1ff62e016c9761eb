package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/sforge-dev/netiso/policy"
)

// Capabilities that would let a process undo or bypass its rules:
// NET_ADMIN edits the firewall, SYS_ADMIN enters other namespaces and much
// else, NET_RAW opens packet sockets that netfilter never sees. A
// privileged container holds all three.
const (
	CapNetAdmin = "CAP_NET_ADMIN"
	CapSysAdmin = "CAP_SYS_ADMIN"
	CapNetRaw   = "CAP_NET_RAW"
)

// Refusal is a container that must not start: isolation was asked for and
// cannot be guaranteed. Its message names the cause and the fix.
type Refusal struct {
	ID    string
	Cause string
	Fix   string
}

func (r *Refusal) Error() string {
	id := r.ID
	if id == "" {
		id = "?"
	}
	return fmt.Sprintf("container %s refused: %s; %s", id, r.Cause, r.Fix)
}

// Decision is what to enforce for a container that asks for isolation.
type Decision struct {
	Allow policy.Allowlist
	// NetNSPath is the network namespace the spec names by path (another
	// container's, a pod's), "" for a namespace of the container's own.
	NetNSPath string
	// UserNS: the container has a user namespace, which then owns a
	// network namespace the runtime creates.
	UserNS bool
}

// Options are what differs between the callers of Decide.
type Options struct {
	// HostNetNS are the network namespaces the container must not join
	// (init's, the caller's); one the caller may not read is skipped.
	HostNetNS []string
	// DropsNetRaw: the caller removes CAP_NET_RAW from the spec (the
	// runtime wrapper does). Otherwise (a hook cannot change the spec) a
	// process that holds it is refused.
	DropsNetRaw bool
}

// Decide is the one admission decision of sforge's runtime wrapper and
// hook: nil when the container asks for no isolation, a *Refusal when it
// asks and cannot be isolated, else what to enforce.
func Decide(id string, s *specs.Spec, o Options) (*Decision, error) {
	refuse := func(cause, fix string) error { return &Refusal{ID: id, Cause: cause, Fix: fix} }
	allow, found, err := policy.Find(s.Annotations, Env(s))
	var bad *policy.AnnotationError
	switch {
	case errors.As(err, &bad):
		return nil, refuse(err.Error(), "fix the value (`sforge policy annotation` prints a valid one)")
	case err != nil:
		return nil, refuse(err.Error(), "set the allowlist once")
	case !found:
		return nil, nil
	}
	d := &Decision{Allow: allow, UserNS: HasNamespace(s, specs.UserNamespace)}
	const ownNetwork = "give the container a network of its own (no --network host)"
	netns := NetworkNamespace(s)
	if netns == nil {
		return nil, refuse("its config has no network namespace, so it would use the host's network namespace", ownNetwork)
	}
	if netns.Path != "" {
		if shared, err := SharesNetNS(netns.Path, o.HostNetNS); err == nil && shared {
			return nil, refuse("its config names the host's network namespace", ownNetwork)
		}
	}
	d.NetNSPath = netns.Path
	if s.Process == nil {
		return nil, refuse("its config has no process", "give the container a process")
	}
	if cause, fix := checkProcess(s.Process, o.DropsNetRaw); cause != "" {
		return nil, refuse("its process "+cause, fix)
	}
	return d, nil
}

// DecideExec is the admission of a process started in an isolated
// container after its start (`runc exec`): a *Refusal when the process
// would hold a capability that undoes the rules, nil when it may run
// (once CAP_NET_RAW is dropped, where dropsNetRaw says the caller does).
func DecideExec(id string, p *specs.Process, dropsNetRaw bool) error {
	if cause, fix := checkProcess(p, dropsNetRaw); cause != "" {
		return &Refusal{ID: id, Cause: "the exec'd process " + cause, Fix: fix}
	}
	return nil
}

// checkProcess is the capability half of the admission: the cause and fix
// of a refusal, "" when p may run isolated.
func checkProcess(p *specs.Process, dropsNetRaw bool) (cause, fix string) {
	if p.Capabilities == nil {
		return "lists no capabilities, so it would keep all of the runtime's (CAP_NET_ADMIN included)",
			"list the container's capabilities explicitly"
	}
	forbidden := []string{CapNetAdmin, CapSysAdmin}
	fix = "run it without them (no --privileged, no --cap-add NET_ADMIN or SYS_ADMIN)"
	if !dropsNetRaw {
		forbidden = []string{CapNetAdmin, CapNetRaw, CapSysAdmin}
		fix = "run it without them (no --privileged, no --cap-add NET_ADMIN or SYS_ADMIN, and --cap-drop NET_RAW)"
	}
	if held := Holds(p.Capabilities, forbidden...); len(held) > 0 {
		return "holds " + strings.Join(held, " and ") + ", with which it could remove or bypass its egress rules", fix
	}
	return "", ""
}

// Holds lists which of caps c holds, each with its sets:
// "CAP_NET_ADMIN (bounding, effective)".
func Holds(c *specs.LinuxCapabilities, caps ...string) []string {
	var held []string
	for _, want := range caps {
		var in []string
		for _, set := range CapabilitySets {
			if slices.ContainsFunc(*capabilitySet(c, set), func(x string) bool { return CanonicalCap(x) == want }) {
				in = append(in, set)
			}
		}
		if len(in) > 0 {
			held = append(held, fmt.Sprintf("%s (%s)", want, strings.Join(in, ", ")))
		}
	}
	return held
}

// SharesNetNS reports whether the namespace at path is one of others,
// by device and inode, as the kernel identifies namespaces. An entry of
// others the caller may not read is skipped (/proc/1 from a user
// namespace); the caller's own is always readable.
func SharesNetNS(path string, others []string) (bool, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return false, fmt.Errorf("failed to inspect network namespace %s: %w", path, err)
	}
	for _, o := range others {
		var ost syscall.Stat_t
		if err := syscall.Stat(o, &ost); err != nil {
			if errors.Is(err, fs.ErrPermission) {
				continue
			}
			return false, fmt.Errorf("failed to inspect network namespace %s: %w", o, err)
		}
		if st.Dev == ost.Dev && st.Ino == ost.Ino {
			return true, nil
		}
	}
	return false, nil
}
