// Package task loads the task JSON that describes one agent run: the image
// (or how to build it), the commands that install dependencies at build
// time, the query for the agent, the default isolation and the timeout.
//
// The loader is strict because a typo in a task must not silently change
// what the agent may reach: unknown fields, wrong types, duplicate keys and
// missing required fields are errors that name the field. The JSON Schema
// beside this file (task.schema.json) describes the same format for editors
// and other tools; a test keeps the two in agreement.
package task

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/sforge-dev/netiso/policy"
)

// FileName is the file looked for when --task names a directory.
const FileName = "task.json"

// MaxFileBytes bounds a task file: it is configuration, not data.
const MaxFileBytes = 1 << 20

// Limits the schema states too.
const (
	MaxSetupCmds    = 256
	MaxEnv          = 256
	MaxAllowDomains = 256
	MaxQueryBytes   = 256 << 10
	MaxTimeout      = 7 * 24 * time.Hour
	DefaultWorkdir  = "/workspace"
)

// Task is a loaded, validated task.
type Task struct {
	// Name identifies the task in container and image names.
	Name string
	// Image is the image to run, or the base the setup commands run on.
	Image string
	// Build describes an image built from a context directory.
	Build *Build
	// SetupCmds run at image build time, with network, each as
	// `/bin/sh -c CMD` in a RUN step.
	SetupCmds []string
	// AgentQuery is the prompt given to the agent.
	AgentQuery string
	// Internet is the task's default isolation setting; nil when unset.
	Internet *bool
	// Timeout bounds the agent's run; zero means none.
	Timeout time.Duration
	// Env is added to the agent's environment.
	Env map[string]string
	// AllowDomains are the names the agent may reach through sforge's
	// egress proxy when the network is isolated, sorted, without
	// duplicates.
	AllowDomains []policy.DomainPattern
	// APIViaProxy sends the agent's API through the egress proxy too, its
	// name one more allowed domain (nil: unset).
	APIViaProxy *bool
	// Command is the argv of the generic `command` agent.
	Command []string

	// Path is the file the task was read from, as given; Dir is its
	// directory, against which Build.Context is resolved.
	Path string
	Dir  string
}

// Build is the "build" object: either a Dockerfile in Context, or Base with
// Context (optional) copied to Workdir.
type Build struct {
	// Context is an absolute directory after loading.
	Context string
	// Dockerfile is relative to Context; "Dockerfile" when Base is empty.
	Dockerfile string
	// Base is the image a generated Dockerfile starts FROM.
	Base string
	// Workdir is where Context is copied when Base is set.
	Workdir string
}

// FieldError reports a task field that is missing, unknown or invalid.
// Field is a path such as "timeout", "build.context" or "setup_cmds[2]";
// it is empty for errors about the whole file.
type FieldError struct {
	File   string
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %s", e.File, e.Reason)
	}
	return fmt.Sprintf("%s: field %q: %s", e.File, e.Field, e.Reason)
}

// ReservedEnv are environment variables sforge sets in the container
// itself; a task must not set them (SFORGE_EGRESS would even carry an
// allowlist of its own choosing).
var ReservedEnv = []string{
	"SFORGE_EGRESS",
	"SFORGE_AGENT_QUERY",
	"SFORGE_JUDGE_URL",
	"SFORGE_AGENT_API_BASE_URL",
}

// These patterns are repeated in task.schema.json; TestSchemaAgreesWithLoader
// fails when the two drift apart.
var (
	namePattern     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
	imagePattern    = regexp.MustCompile(`^[a-z0-9][A-Za-z0-9._/:@-]{0,254}$`)
	envNamePattern  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	durationPattern = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`)
	workdirPattern  = regexp.MustCompile(`^/[^\x00]*$`)
)

// Load reads a task from a task.json file or from a directory holding one.
func Load(path string) (*Task, error) {
	if path == "" {
		return nil, errors.New("--task is required (a task directory or a task.json file)")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read task %s: %w", path, unwrapPathError(err))
	}
	file := path
	if fi.IsDir() {
		file = filepath.Join(path, FileName)
	}
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && fi.IsDir() {
			return nil, fmt.Errorf("failed to read task: directory %s has no %s", path, FileName)
		}
		return nil, fmt.Errorf("failed to read task %s: %w", file, unwrapPathError(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read task %s: %w", file, err)
	}
	if len(data) > MaxFileBytes {
		return nil, &FieldError{File: file, Reason: fmt.Sprintf("larger than %d bytes", MaxFileBytes)}
	}
	dir, err := filepath.Abs(filepath.Dir(file))
	if err != nil {
		return nil, fmt.Errorf("failed to resolve task directory: %w", err)
	}
	return Parse(file, dir, data)
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Parse validates task JSON. file names the source in errors; dir is the
// directory build.context is relative to (it must exist for a task that
// uses build).
func Parse(file, dir string, data []byte) (*Task, error) {
	p := parser{file: file}
	fields, err := p.object("", data)
	if err != nil {
		return nil, err
	}
	t := &Task{Path: file, Dir: dir}
	for _, kv := range fields {
		switch kv.key {
		case "name":
			t.Name, err = p.str(kv.key, kv.val, namePattern, "a name of letters, digits, '_', '.', '-' (at most 63, starting with a letter or digit)")
		case "image":
			t.Image, err = p.str(kv.key, kv.val, imagePattern, `an image reference such as "debian:12"`)
		case "build":
			t.Build, err = p.build(kv.val)
		case "setup_cmds":
			t.SetupCmds, err = p.strings(kv.key, kv.val, 0, MaxSetupCmds)
		case "agent_query":
			t.AgentQuery, err = p.str(kv.key, kv.val, nil, "")
			if err == nil && len(t.AgentQuery) > MaxQueryBytes {
				err = p.fail(kv.key, "longer than %d bytes", MaxQueryBytes)
			}
		case "internet":
			var b bool
			if b, err = p.boolean(kv.key, kv.val); err == nil {
				t.Internet = &b
			}
		case "timeout":
			t.Timeout, err = p.duration(kv.key, kv.val)
		case "env":
			t.Env, err = p.env(kv.val)
		case "command":
			t.Command, err = p.strings(kv.key, kv.val, 1, 1024)
		case "allow_domains":
			t.AllowDomains, err = p.domains(kv.key, kv.val)
		case "api_via_proxy":
			var b bool
			if b, err = p.boolean(kv.key, kv.val); err == nil {
				t.APIViaProxy = &b
			}
		default:
			err = p.fail(kv.key, "unknown field (allowed: name, image, build, setup_cmds, agent_query, internet, timeout, env, command, allow_domains, api_via_proxy)")
		}
		if err != nil {
			return nil, err
		}
	}
	if t.Name == "" {
		return nil, p.fail("name", "is required")
	}
	if !has(fields, "agent_query") {
		return nil, p.fail("agent_query", "is required (the prompt given to the agent)")
	}
	switch {
	case t.Image == "" && t.Build == nil:
		return nil, &FieldError{File: file, Reason: `one of "image" or "build" is required`}
	case t.Image != "" && t.Build != nil:
		return nil, &FieldError{File: file, Field: "build", Reason: `cannot be combined with "image" (put the image in "build.base")`}
	}
	if t.Build != nil {
		if err := p.checkBuildFiles(dir, t.Build); err != nil {
			return nil, err
		}
	}
	return t, nil
}

type member struct {
	key string
	val json.RawMessage
}

func has(fields []member, key string) bool {
	for _, f := range fields {
		if f.key == key {
			return true
		}
	}
	return false
}

type parser struct{ file string }

func (p parser) fail(field, format string, args ...any) error {
	return &FieldError{File: p.file, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// object reads one JSON object and returns its members in order, refusing
// duplicate keys (encoding/json would silently keep the last one) and
// anything after the closing brace.
func (p parser) object(field string, data []byte) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	syntax := func(err error) error {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return &FieldError{File: p.file, Field: field, Reason: fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se.Error())}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &FieldError{File: p.file, Field: field, Reason: "invalid JSON: unexpected end of input"}
		}
		return &FieldError{File: p.file, Field: field, Reason: "invalid JSON: " + err.Error()}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, syntax(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		if field == "" {
			return nil, &FieldError{File: p.file, Reason: "want a JSON object {...}, got " + describe(data)}
		}
		return nil, p.fail(field, "want an object, got %s", describe(data))
	}
	var out []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntax(err)
		}
		key, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, syntax(err)
		}
		path := key
		if field != "" {
			path = field + "." + key
		}
		if seen[key] {
			return nil, p.fail(path, "appears more than once")
		}
		seen[key] = true
		out = append(out, member{key: key, val: val})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, syntax(err)
	}
	if field == "" {
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return nil, &FieldError{File: p.file, Reason: "unexpected data after the JSON object"}
		}
	}
	return out, nil
}

// describe renders a JSON value for an error message: the value itself,
// shortened, so that `got 5` or `got "5 minutes"` says what was written.
func describe(raw []byte) string {
	s := strings.TrimSpace(string(raw))
	if s == "" {
		return "nothing"
	}
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}

func isNull(raw json.RawMessage) bool { return strings.TrimSpace(string(raw)) == "null" }

func (p parser) str(field string, raw json.RawMessage, re *regexp.Regexp, want string) (string, error) {
	var s string
	if isNull(raw) || json.Unmarshal(raw, &s) != nil {
		if want == "" {
			want = "a string"
		}
		return "", p.fail(field, "want %s, got %s", want, describe(raw))
	}
	if s == "" {
		return "", p.fail(field, "must not be empty")
	}
	if re != nil && !re.MatchString(s) {
		return "", p.fail(field, "want %s, got %s", want, describe(raw))
	}
	return s, nil
}

func (p parser) boolean(field string, raw json.RawMessage) (bool, error) {
	var b bool
	if isNull(raw) || json.Unmarshal(raw, &b) != nil {
		return false, p.fail(field, "want true or false, got %s", describe(raw))
	}
	return b, nil
}

func (p parser) duration(field string, raw json.RawMessage) (time.Duration, error) {
	const want = `a duration like "30m"`
	var s string
	if isNull(raw) || json.Unmarshal(raw, &s) != nil || !durationPattern.MatchString(s) {
		return 0, p.fail(field, "want %s, got %s", want, describe(raw))
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, p.fail(field, "want %s, got %s", want, describe(raw))
	}
	if d <= 0 {
		return 0, p.fail(field, "must be positive, got %s", describe(raw))
	}
	if d > MaxTimeout {
		return 0, p.fail(field, "at most %s, got %s", MaxTimeout, describe(raw))
	}
	return d, nil
}

// domains parses allow_domains: names, or *.NAME for its subdomains.
func (p parser) domains(field string, raw json.RawMessage) ([]policy.DomainPattern, error) {
	list, err := p.strings(field, raw, 0, MaxAllowDomains)
	if err != nil {
		return nil, err
	}
	for i, s := range list {
		if _, err := policy.CheckDomainPattern(s); err != nil {
			return nil, p.fail(fmt.Sprintf("%s[%d]", field, i), "%q: %v", s, err)
		}
	}
	return policy.ParseDomainPatterns(field, list)
}

func (p parser) strings(field string, raw json.RawMessage, minItems, maxItems int) ([]string, error) {
	var items []json.RawMessage
	if isNull(raw) || json.Unmarshal(raw, &items) != nil {
		return nil, p.fail(field, "want an array of strings, got %s", describe(raw))
	}
	if len(items) < minItems {
		return nil, p.fail(field, "must have at least %d element(s)", minItems)
	}
	if len(items) > maxItems {
		return nil, p.fail(field, "has %d elements, more than the limit of %d", len(items), maxItems)
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		s, err := p.str(fmt.Sprintf("%s[%d]", field, i), it, nil, "")
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (p parser) env(raw json.RawMessage) (map[string]string, error) {
	if isNull(raw) {
		return nil, p.fail("env", "want an object of NAME: value strings, got null")
	}
	members, err := p.object("env", raw)
	if err != nil {
		return nil, err
	}
	if len(members) > MaxEnv {
		return nil, p.fail("env", "has %d variables, more than the limit of %d", len(members), MaxEnv)
	}
	out := make(map[string]string, len(members))
	for _, m := range members {
		field := "env." + m.key
		if !envNamePattern.MatchString(m.key) {
			return nil, p.fail(field, "is not a valid variable name (letters, digits and '_', not starting with a digit)")
		}
		for _, r := range ReservedEnv {
			if m.key == r {
				return nil, p.fail(field, "is set by sforge itself and cannot be set by a task")
			}
		}
		var v string
		if isNull(m.val) || json.Unmarshal(m.val, &v) != nil {
			return nil, p.fail(field, "want a string, got %s", describe(m.val))
		}
		if strings.ContainsRune(v, 0) {
			return nil, p.fail(field, "contains a NUL byte")
		}
		out[m.key] = v
	}
	return out, nil
}

func (p parser) build(raw json.RawMessage) (*Build, error) {
	if isNull(raw) {
		return nil, p.fail("build", "want an object, got null")
	}
	members, err := p.object("build", raw)
	if err != nil {
		return nil, err
	}
	b := &Build{}
	for _, m := range members {
		field := "build." + m.key
		switch m.key {
		case "context":
			b.Context, err = p.str(field, m.val, nil, "")
		case "dockerfile":
			b.Dockerfile, err = p.str(field, m.val, nil, "")
		case "base":
			b.Base, err = p.str(field, m.val, imagePattern, `an image reference such as "debian:12"`)
		case "workdir":
			b.Workdir, err = p.str(field, m.val, workdirPattern, `an absolute path such as "/workspace"`)
		default:
			err = p.fail(field, "unknown field (allowed: context, dockerfile, base, workdir)")
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case b.Base == "" && b.Context == "":
		return nil, p.fail("build", `needs "context" (a directory with a Dockerfile) or "base" (an image)`)
	case b.Base != "" && b.Dockerfile != "":
		return nil, p.fail("build.dockerfile", `cannot be combined with "build.base" (sforge generates the Dockerfile from base)`)
	case b.Base == "" && b.Workdir != "":
		return nil, p.fail("build.workdir", `needs "build.base" (with a Dockerfile of your own, set WORKDIR there)`)
	}
	if b.Base != "" && b.Workdir == "" {
		b.Workdir = DefaultWorkdir
	}
	if b.Base == "" && b.Dockerfile == "" {
		b.Dockerfile = "Dockerfile"
	}
	return b, nil
}

// checkBuildFiles resolves build.context against the task's directory and
// checks that it (and the Dockerfile) exist, so that a typo fails here
// rather than halfway through an image build.
func (p parser) checkBuildFiles(dir string, b *Build) error {
	if b.Context != "" {
		ctx := b.Context
		if !filepath.IsAbs(ctx) {
			ctx = filepath.Join(dir, ctx)
		}
		fi, err := os.Stat(ctx)
		if err != nil {
			return p.fail("build.context", "directory %s: %v", ctx, unwrapPathError(err))
		}
		if !fi.IsDir() {
			return p.fail("build.context", "%s is not a directory", ctx)
		}
		b.Context = filepath.Clean(ctx)
	}
	if b.Dockerfile != "" {
		if filepath.IsAbs(b.Dockerfile) || !filepath.IsLocal(b.Dockerfile) {
			return p.fail("build.dockerfile", "must be a path inside build.context, got %q", b.Dockerfile)
		}
		fi, err := os.Stat(filepath.Join(b.Context, b.Dockerfile))
		if err != nil {
			return p.fail("build.dockerfile", "%v", unwrapPathError(err))
		}
		if fi.IsDir() {
			return p.fail("build.dockerfile", "%s is a directory", b.Dockerfile)
		}
	}
	return nil
}

// EffectiveInternet is the task's own default: its "internet" field, or
// true when unset.
func (t *Task) EffectiveInternet() bool { return t.Internet == nil || *t.Internet }
