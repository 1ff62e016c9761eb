package shim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sforge-dev/netiso/policy"
)

// Spec is a bundle's config.json held as generic JSON: the shim edits the
// few members it owns (hooks, capabilities) and writes every other byte of
// the document back as it found it, including fields of runtime-spec
// versions newer than this binary knows.
type Spec struct {
	path string
	mode os.FileMode
	top  map[string]json.RawMessage
	// Decoded views of the parts the shim reads; they are written back into
	// top only when modified.
	annotations map[string]string
	process     map[string]json.RawMessage
	env         []string
	// caps is process.capabilities, decoded on first use.
	caps map[string]json.RawMessage
	// linux and nsList are the linux object and its namespaces, decoded
	// on first use.
	linux  map[string]json.RawMessage
	nsList []namespace
	dirty  bool
}

// SpecFile is the name of the OCI runtime configuration inside a bundle.
const SpecFile = "config.json"

// sforgeAnnotationPrefix starts every annotation of sforge's.
const sforgeAnnotationPrefix = "sforge.io/"

// LoadSpec reads <bundle>/config.json.
func LoadSpec(bundle string) (*Spec, error) {
	f, err := ReadRawSpec(bundle)
	if err != nil {
		return nil, err
	}
	return f.Parse()
}

// RawSpec is a bundle's config.json as read, not yet parsed.
type RawSpec struct {
	Path string
	Data []byte
	Mode os.FileMode
}

// ReadRawSpec reads <bundle>/config.json. The path is not cleaned: runc
// changes into the bundle directory and reads config.json there, so a
// ".." after a symbolic link must mean what it means to the kernel, not
// what filepath.Join would make of it (the shim must read the spec runc
// reads).
func ReadRawSpec(bundle string) (RawSpec, error) {
	path := SpecFile
	if bundle != "" {
		path = strings.TrimSuffix(bundle, "/") + "/" + SpecFile
	}
	f, err := os.Open(path)
	if err != nil {
		return RawSpec{}, fmt.Errorf("failed to open the container spec: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return RawSpec{}, fmt.Errorf("failed to stat the container spec: %w", err)
	}
	b := bytes.NewBuffer(make([]byte, 0, st.Size()+512))
	if _, err := b.ReadFrom(f); err != nil {
		return RawSpec{}, fmt.Errorf("failed to read the container spec %s: %w", path, err)
	}
	return RawSpec{Path: path, Data: b.Bytes(), Mode: st.Mode().Perm()}, nil
}

// Parse decodes the document.
func (f RawSpec) Parse() (*Spec, error) {
	s, err := ParseSpec(f.Data)
	if err != nil {
		return nil, fmt.Errorf("failed to parse the container spec %s: %w", f.Path, err)
	}
	s.path, s.mode = f.Path, f.Mode
	return s, nil
}

// MentionsSforge reports whether the document may hold anything of
// sforge's: the allowlist annotation or variable, or an annotation the
// shim wrote. When it returns false the spec has none of them, and the
// shim hands the container to runc without parsing it. It errs towards
// true: JSON may spell any character of a key as an escape, so a document
// with any backslash counts as mentioning sforge.
func (f RawSpec) MentionsSforge() bool {
	return bytes.Contains(f.Data, []byte(sforgeAnnotationPrefix)) || bytes.Contains(f.Data, []byte(policy.EnvVar)) ||
		bytes.IndexByte(f.Data, '\\') >= 0
}

// ParseSpec decodes a config.json document.
func ParseSpec(b []byte) (*Spec, error) {
	s := &Spec{}
	if err := json.Unmarshal(b, &s.top); err != nil {
		return nil, err
	}
	if s.top == nil {
		return nil, errors.New("the document is not a JSON object")
	}
	if raw, ok := s.top["annotations"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &s.annotations); err != nil {
			return nil, fmt.Errorf("field annotations: %w", err)
		}
	}
	if raw, ok := s.top["process"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &s.process); err != nil {
			return nil, fmt.Errorf("field process: %w", err)
		}
		if raw, ok := s.process["env"]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, &s.env); err != nil {
				return nil, fmt.Errorf("field process.env: %w", err)
			}
		}
	}
	return s, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// Annotations returns the spec's annotations (nil when it has none).
func (s *Spec) Annotations() map[string]string { return s.annotations }

// Env returns process.env.
func (s *Spec) Env() []string { return s.env }

// Hook is an OCI hook (runtime-spec config.md#posix-platform-hooks).
type Hook struct {
	Path    string   `json:"path"`
	Args    []string `json:"args,omitempty"`
	Env     []string `json:"env,omitempty"`
	Timeout *int     `json:"timeout,omitempty"`
}

// AddHook appends h to hooks.<stage> unless a hook with the same path and
// arguments is already there (a runtime may call create twice on one
// bundle; the hook must still run once). It reports whether it added h.
func (s *Spec) AddHook(stage string, h Hook) (bool, error) {
	hooks, err := objectField(s.top, "hooks")
	if err != nil {
		return false, err
	}
	var list []json.RawMessage
	if raw, ok := hooks[stage]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &list); err != nil {
			return false, fmt.Errorf("field hooks.%s: %w", stage, err)
		}
	}
	for i, raw := range list {
		var have Hook
		if err := json.Unmarshal(raw, &have); err != nil {
			return false, fmt.Errorf("field hooks.%s[%d]: %w", stage, i, err)
		}
		if have.Path == h.Path && slices.Equal(have.Args, h.Args) {
			return false, nil
		}
	}
	raw, err := marshal(h)
	if err != nil {
		return false, err
	}
	list = append(list, raw)
	if hooks[stage], err = marshal(list); err != nil {
		return false, err
	}
	if s.top["hooks"], err = marshal(hooks); err != nil {
		return false, err
	}
	s.dirty = true
	return true, nil
}

// Hooks returns hooks.<stage> (for tests and checks).
func (s *Spec) Hooks(stage string) ([]Hook, error) {
	hooks, err := objectField(s.top, "hooks")
	if err != nil {
		return nil, err
	}
	var list []Hook
	if raw, ok := hooks[stage]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("field hooks.%s: %w", stage, err)
		}
	}
	return list, nil
}

// capabilitySets are the members of process.capabilities.
var capabilitySets = []string{"bounding", "effective", "inheritable", "permitted", "ambient"}

// DropCapability removes c (for example "CAP_NET_RAW", in any of the
// spellings canonicalCap accepts) from every capability set of the
// process. It reports whether anything changed.
func (s *Spec) DropCapability(c string) (bool, error) {
	if s.process == nil {
		return false, nil
	}
	caps, err := s.capabilities()
	if err != nil {
		return false, err
	}
	changed := false
	for _, set := range capabilitySets {
		raw, ok := caps[set]
		if !ok || isNull(raw) {
			continue
		}
		var list []string
		if err := json.Unmarshal(raw, &list); err != nil {
			return false, fmt.Errorf("field process.capabilities.%s: %w", set, err)
		}
		kept := slices.DeleteFunc(slices.Clone(list), func(x string) bool { return canonicalCap(x) == canonicalCap(c) })
		if len(kept) == len(list) {
			continue
		}
		if caps[set], err = marshal(kept); err != nil {
			return false, err
		}
		changed = true
	}
	if !changed {
		return false, nil
	}
	if s.process["capabilities"], err = marshal(caps); err != nil {
		return false, err
	}
	if s.top["process"], err = encodeObject(s.process); err != nil {
		return false, err
	}
	s.dirty = true
	return true, nil
}

// HasCapabilities reports whether the spec has a process with a
// process.capabilities object (runc leaves a process without one every
// capability the runtime has).
func (s *Spec) HasCapabilities() (bool, error) {
	if s.process == nil {
		return false, nil
	}
	raw, ok := s.process["capabilities"]
	if !ok || isNull(raw) {
		return false, nil
	}
	if _, err := s.capabilities(); err != nil {
		return false, err
	}
	return true, nil
}

// capabilities decodes process.capabilities once: the checks read each
// set, and DropCapability writes them back.
func (s *Spec) capabilities() (map[string]json.RawMessage, error) {
	if s.caps == nil {
		caps, err := objectField(s.process, "capabilities")
		if err != nil {
			return nil, fmt.Errorf("field process: %w", err)
		}
		s.caps = caps
	}
	return s.caps, nil
}

// Capabilities returns the named set of process.capabilities.
func (s *Spec) Capabilities(set string) ([]string, error) {
	if s.process == nil {
		return nil, nil
	}
	caps, err := s.capabilities()
	if err != nil {
		return nil, err
	}
	var list []string
	if raw, ok := caps[set]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("field process.capabilities.%s: %w", set, err)
		}
	}
	return list, nil
}

// NetworkNamespace reports whether linux.namespaces has a network entry and
// its path ("" for a new namespace).
func (s *Spec) NetworkNamespace() (found bool, path string, err error) {
	list, err := s.namespaces()
	if err != nil {
		return false, "", err
	}
	for _, n := range list {
		if n.typ == "network" {
			return true, n.path, nil
		}
	}
	return false, "", nil
}

// objectField decodes obj[name] as a JSON object; a missing or null member
// is an empty object.
func objectField(obj map[string]json.RawMessage, name string) (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	raw, ok := obj[name]
	if !ok || isNull(raw) {
		return out, nil
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("field %s: %w", name, err)
	}
	return out, nil
}

// Bytes renders the document. HTML escaping is off so that strings the
// shim did not touch keep their bytes ("<", ">" and "&" stay as they are).
func (s *Spec) Bytes() ([]byte, error) {
	return encodeObject(s.top)
}

// Modified reports whether the document changed since it was loaded.
func (s *Spec) Modified() bool { return s.dirty }

// Flush writes the document back when it changed: to a temporary file in
// the bundle, with the original mode, then renamed over config.json, so
// the runtime reads either the old or the new spec, never a torn one.
//
// Unlike WriteFileAtomic it does not fsync: a bundle is runtime state
// (engines keep it under /run), a container does not survive the crash
// that fsync would guard against, and on a disk-backed bundle the two
// fsyncs cost 1-10 ms of every isolated container's start here (a
// journal commit each).
func (s *Spec) Flush() error {
	if !s.dirty {
		return nil
	}
	b, err := s.Bytes()
	if err != nil {
		return fmt.Errorf("failed to encode the container spec: %w", err)
	}
	if err := replaceFile(s.path, b, s.mode); err != nil {
		return fmt.Errorf("failed to write the container spec: %w", err)
	}
	s.dirty = false
	return nil
}

// replaceFile replaces path with data through a temporary file in the same
// directory and a rename, without syncing.
func replaceFile(path string, data []byte, mode os.FileMode) error {
	return writeFile(path, data, mode, false)
}

// WriteFileAtomic replaces path with data: temporary file in the same
// directory, fsync, chmod to mode, rename, fsync of the directory.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	return writeFile(path, data, mode, true)
}

// writeFile writes data to a temporary file beside path, with mode, and
// renames it over path, so that readers see the old or the new content,
// never a torn one. With sync, the file is fsync'd before the rename and
// the directory after it, so that the new content also survives a crash.
func writeFile(path string, data []byte, mode os.FileMode, sync bool) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".sforge-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err = f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err = f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if sync {
		if d, derr := os.Open(dir); derr == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	return nil
}

// encodeObject renders a JSON object (keys sorted, as json.Marshal does)
// whose members are already JSON, from the parser or from marshal, so it
// copies them as they are. json.Marshal would read every member again to
// validate and compact it: for the document, the whole config.json, the
// seccomp profile included, on every isolated create (a quarter of the
// time the shim spent on the spec here).
func encodeObject(obj map[string]json.RawMessage) (json.RawMessage, error) {
	keys := slices.Sorted(maps.Keys(obj))
	n := 2
	for _, k := range keys {
		n += len(k) + len(obj[k]) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		key, err := marshal(k)
		if err != nil {
			return nil, err
		}
		b = append(append(b, key...), ':')
		if v := bytes.TrimSpace(obj[k]); len(v) > 0 {
			b = append(b, v...)
		} else {
			b = append(b, "null"...) // what json.Marshal writes for an empty RawMessage
		}
	}
	return append(b, '}'), nil
}

// marshal is json.Marshal without HTML escaping, so that members the shim
// re-encodes keep their bytes.
func marshal(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// HasNamespace reports whether linux.namespaces has an entry of type typ
// ("user", "network", ...), whether new or given by path.
func (s *Spec) HasNamespace(typ string) (bool, error) {
	list, err := s.namespaces()
	if err != nil {
		return false, err
	}
	for _, n := range list {
		if n.typ == typ {
			return true, nil
		}
	}
	return false, nil
}

// SetNetworkNamespacePath sets the path of the linux.namespaces network
// entry, or removes it when path is "" (a new namespace). The spec must
// have a network entry.
func (s *Spec) SetNetworkNamespacePath(path string) error {
	list, err := s.namespaces()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(list, func(n namespace) bool { return n.typ == "network" })
	if i < 0 {
		return errors.New("linux.namespaces has no network entry")
	}
	n := list[i]
	if path == "" {
		delete(n.raw, "path")
	} else if n.raw["path"], err = marshal(path); err != nil {
		return err
	}
	n.path = path
	list[i] = n
	items := make([]json.RawMessage, len(list))
	for i, m := range list {
		if items[i], err = encodeObject(m.raw); err != nil {
			return err
		}
	}
	if s.linux["namespaces"], err = marshal(items); err != nil {
		return err
	}
	if s.top["linux"], err = encodeObject(s.linux); err != nil {
		return err
	}
	s.dirty = true
	return nil
}

// namespace is an entry of linux.namespaces: its type and path, and its
// members as found (to write back what the shim does not know).
type namespace struct {
	typ, path string
	raw       map[string]json.RawMessage
}

// namespaces decodes linux.namespaces once. The linux object is decoded
// into raw members once too: it holds the seccomp profile, most of a
// Docker config.json, which every other decoding would read again.
func (s *Spec) namespaces() ([]namespace, error) {
	if s.nsList != nil {
		return s.nsList, nil
	}
	linux, err := objectField(s.top, "linux")
	if err != nil {
		return nil, err
	}
	var raws []map[string]json.RawMessage
	if raw, ok := linux["namespaces"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &raws); err != nil {
			return nil, fmt.Errorf("field linux.namespaces: %w", err)
		}
	}
	list := make([]namespace, 0, len(raws))
	for i, r := range raws {
		n := namespace{raw: r}
		for member, dst := range map[string]*string{"type": &n.typ, "path": &n.path} {
			if v, ok := r[member]; ok && !isNull(v) {
				if err := json.Unmarshal(v, dst); err != nil {
					return nil, fmt.Errorf("field linux.namespaces[%d].%s: %w", i, member, err)
				}
			}
		}
		list = append(list, n)
	}
	s.linux, s.nsList = linux, list
	return list, nil
}

// SetAnnotation sets annotations[k] to v, or removes it when v is "".
func (s *Spec) SetAnnotation(k, v string) error {
	if v == "" {
		if _, ok := s.annotations[k]; !ok {
			return nil
		}
		delete(s.annotations, k)
	} else {
		if s.annotations == nil {
			s.annotations = map[string]string{}
		}
		s.annotations[k] = v
	}
	raw, err := marshal(s.annotations)
	if err != nil {
		return err
	}
	s.top["annotations"] = raw
	s.dirty = true
	return nil
}
