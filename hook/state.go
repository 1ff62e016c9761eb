package hook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Bounds on what the hook reads: the state is a few hundred bytes, a
// config.json rarely more than tens of kilobytes.
const (
	maxStateBytes = 1 << 20
	maxSpecBytes  = 16 << 20
)

// ReadState decodes the OCI state the runtime writes on the hook's stdin
// and checks the fields every stage needs: the id and an absolute bundle
// path. The pid is checked by the stages that need it.
func ReadState(r io.Reader) (*specs.State, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxStateBytes+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read the OCI state from stdin: %w", err)
	}
	if len(data) > maxStateBytes {
		return nil, fmt.Errorf("the OCI state on stdin is larger than %d bytes", maxStateBytes)
	}
	// Only the members the hook reads: decoding the state's annotations
	// (a runtime may copy them all there) would be work for nothing.
	var lean struct {
		Version string `json:"ociVersion"`
		ID      string `json:"id"`
		Status  string `json:"status"`
		Pid     int    `json:"pid"`
		Bundle  string `json:"bundle"`
	}
	if err := json.Unmarshal(data, &lean); err != nil {
		return nil, fmt.Errorf("failed to decode the OCI state on stdin: %w", err)
	}
	st := specs.State{Version: lean.Version, ID: lean.ID, Status: specs.ContainerState(lean.Status), Pid: lean.Pid, Bundle: lean.Bundle}
	if st.ID == "" {
		return nil, errors.New("the OCI state on stdin has no id")
	}
	if st.Bundle == "" || !filepath.IsAbs(st.Bundle) {
		return nil, fmt.Errorf("the OCI state's bundle %q is not an absolute path", st.Bundle)
	}
	if st.Pid < 0 {
		return nil, fmt.Errorf("the OCI state's pid %d is negative", st.Pid)
	}
	return &st, nil
}

// LoadSpec reads <bundle>/config.json.
func LoadSpec(bundle string) (*specs.Spec, error) {
	path := filepath.Join(bundle, "config.json")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failed to open the container's config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSpecBytes+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", path, err)
	}
	if len(data) > maxSpecBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSpecBytes)
	}
	s, err := ParseSpec(data)
	if err != nil {
		return nil, fmt.Errorf("failed to decode %s: %w", path, err)
	}
	return s, nil
}

// leanSpec is the part of config.json the hook decides on. A runtime's
// config.json carries much more (Docker's seccomp profile alone is
// hundreds of strings): decoding all of it into specs.Spec took 0.8-1.2 ms
// in a fresh hook process here, against about 0.2 ms for these members,
// on every container start and stop. Members the hook does not read are
// skipped, not validated; runc validates the whole spec itself. hook/front
// reads these same members in C (and ReadState's): a change here is one
// there too (hook/front/front_test.go compares the two readers).
type leanSpec struct {
	Version     string            `json:"ociVersion"`
	Annotations map[string]string `json:"annotations"`
	Process     *struct {
		Env          []string                 `json:"env"`
		Capabilities *specs.LinuxCapabilities `json:"capabilities"`
	} `json:"process"`
	Linux *struct {
		Namespaces []specs.LinuxNamespace `json:"namespaces"`
	} `json:"linux"`
}

// ParseSpec decodes the members of a config.json the hook reads
// (annotations, process.env, process.capabilities, linux.namespaces)
// into a specs.Spec that holds only those.
func ParseSpec(data []byte) (*specs.Spec, error) {
	var l leanSpec
	if err := json.Unmarshal(data, &l); err != nil {
		return nil, err
	}
	s := &specs.Spec{Version: l.Version, Annotations: l.Annotations}
	if l.Process != nil {
		s.Process = &specs.Process{Env: l.Process.Env, Capabilities: l.Process.Capabilities}
	}
	if l.Linux != nil {
		s.Linux = &specs.Linux{Namespaces: l.Linux.Namespaces}
	}
	return s, nil
}

// netNamespace returns the spec's network namespace entry, nil when the
// container would share the runtime's (the host's) network namespace.
func netNamespace(s *specs.Spec) *specs.LinuxNamespace {
	if s.Linux == nil {
		return nil
	}
	for i := range s.Linux.Namespaces {
		if s.Linux.Namespaces[i].Type == specs.NetworkNamespace {
			return &s.Linux.Namespaces[i]
		}
	}
	return nil
}

// processEnv is the container process's environment, where the allowlist
// travels when the runtime drops annotations (Docker before API 1.43).
func processEnv(s *specs.Spec) []string {
	if s.Process == nil {
		return nil
	}
	return s.Process.Env
}
