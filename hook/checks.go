package hook

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// forbiddenCaps would let the process undo or bypass the rules: NET_ADMIN
// edits iptables, NET_RAW opens packet sockets that netfilter does not see,
// SYS_ADMIN can enter other namespaces and much else. A privileged
// container has all three.
var forbiddenCaps = []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_ADMIN"}

// checkCaps refuses a process that holds a forbidden capability in any
// set. A spec without a capabilities object is refused too: runc then
// leaves the process every capability the runtime has.
func checkCaps(s *specs.Spec) (cause, fix string) {
	if s.Process == nil {
		return "config.json has no process", "give the container a process"
	}
	c := s.Process.Capabilities
	if c == nil {
		return "config.json lists no capabilities, so the process would keep all of the runtime's (CAP_NET_ADMIN included)",
			"list the container's capabilities explicitly, without " + strings.Join(forbiddenCaps, ", ")
	}
	sets := []struct {
		name string
		caps []string
	}{
		{"bounding", c.Bounding}, {"effective", c.Effective}, {"inheritable", c.Inheritable},
		{"permitted", c.Permitted}, {"ambient", c.Ambient},
	}
	var found []string
	for _, cap := range forbiddenCaps {
		var in []string
		for _, set := range sets {
			if slices.ContainsFunc(set.caps, func(c string) bool { return canonicalCap(c) == cap }) {
				in = append(in, set.name)
			}
		}
		if len(in) > 0 {
			found = append(found, fmt.Sprintf("%s (%s)", cap, strings.Join(in, ", ")))
		}
	}
	if len(found) == 0 {
		return "", ""
	}
	return "the process holds " + strings.Join(found, " and ") + ", with which it could remove or bypass the egress rules",
		"run it unprivileged without these capabilities (no --privileged, no --cap-add NET_ADMIN or SYS_ADMIN, and --cap-drop NET_RAW)"
}

// canonicalCap accepts the spellings runtimes and users write: "NET_RAW",
// "net_raw", "CAP_NET_RAW". Matching loosely can only refuse more.
func canonicalCap(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	if !strings.HasPrefix(c, "CAP_") {
		c = "CAP_" + c
	}
	return c
}

// hostNetNS lists the namespaces a container must not share: init's (the
// machine's) and the hook's own, which is the runtime's.
var hostNetNS = []string{"/proc/1/ns/net", "/proc/self/ns/net"}

// sharesNetNS reports whether the namespace at path is one of others,
// comparing device and inode as the kernel identifies namespaces. An entry
// of others the hook may not read is skipped (/proc/1 of a hook in a user
// namespace); /proc/self is always readable, so the check never becomes
// empty.
func sharesNetNS(path string, others []string) (bool, error) {
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

// pathExists reports whether path exists; errors other than "does not
// exist" count as existing, so that Remove gets to report them.
func pathExists(path string) bool {
	_, err := os.Stat(path)
	return !os.IsNotExist(err)
}
