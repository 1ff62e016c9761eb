package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"
)

// object is a JSON object as written: its members in order, repeats
// included, each value as its bytes. sforge edits a few members and writes
// every other byte back as found.
type object struct {
	members []member
}

type member struct {
	key   string
	value json.RawMessage
}

// MemberError is a member that runc (encoding/json into specs.Spec) would
// read differently from how a reader of exact names does: a name that
// matches a field only regardless of case, or one written twice (runc
// merges repeated objects). sforge refuses such a document rather than
// decide on something runc reads another way.
type MemberError struct {
	// Where is the object, "" for the document itself ("process",
	// "linux.namespaces[0]").
	Where string
	// Key is the member as written; Want, when set, is the name runc
	// matches it to.
	Key, Want string
	Repeated  bool
}

func (e *MemberError) Error() string {
	in := "the document"
	if e.Where != "" {
		in = e.Where
	}
	if e.Repeated {
		return fmt.Sprintf("member %q of %s is written more than once (runc reads the copies as one); write it once", e.Key, in)
	}
	return fmt.Sprintf("member %q of %s is %q to runc, which matches member names regardless of case; spell it %q", e.Key, in, e.Want, e.Want)
}

// parseObject reads a JSON object whose members named in names are decided
// on: a name equal to one of them regardless of case must be spelled
// exactly so, and written once. Other members are kept as written.
func parseObject(data []byte, where string, names ...string) (*object, error) {
	folded := make(map[string]string, len(names))
	for _, n := range names {
		folded[fold(n)] = n
	}
	return readObject(data, where, func(key string) (string, bool) {
		n, ok := folded[fold(key)]
		return n, ok
	})
}

// readObject reads a JSON object, members in order. decided tells, for a
// member name, whether sforge decides on it and the name runc matches it
// to; such a member must be spelled that way, and written once.
func readObject(data []byte, where string, decided func(key string) (string, bool)) (*object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	o := &object{}
	var seen []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // the decoder allows only strings here
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, err
		}
		if want, ok := decided(key); ok {
			switch {
			case key != want:
				return nil, &MemberError{Where: where, Key: key, Want: want}
			case slices.Contains(seen, want):
				return nil, &MemberError{Where: where, Key: key, Repeated: true}
			}
			seen = append(seen, want)
		}
		o.members = append(o.members, member{key: key, value: value})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	return o, nil
}

// fold is encoding/json's key folding: two names are the same field to it
// exactly when their folds are equal.
func fold(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return string(out)
}

// foldRune is the smallest rune of r's fold set, as encoding/json folds.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// get returns the value of key, nil when it is absent or null.
func (o *object) get(key string) json.RawMessage {
	if o == nil {
		return nil
	}
	for _, m := range o.members {
		if m.key == key {
			if isNull(m.value) {
				return nil
			}
			return m.value
		}
	}
	return nil
}

// set replaces the value of key, or appends the member.
func (o *object) set(key string, value json.RawMessage) {
	for i := range o.members {
		if o.members[i].key == key {
			o.members[i].value = value
			return
		}
	}
	o.members = append(o.members, member{key: key, value: value})
}

// encode writes the object, its members in order, their values as they are.
func (o *object) encode() json.RawMessage {
	n := 2
	for _, m := range o.members {
		n += len(m.key) + len(m.value) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, m := range o.members {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(b, mustMarshal(m.key)...), ':')
		b = append(b, m.value...)
	}
	return append(b, '}')
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// marshal is json.Marshal without HTML escaping, so that what sforge
// re-encodes keeps its bytes.
func marshal(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// mustMarshal marshals what cannot fail to (strings, string slices).
func mustMarshal(v any) json.RawMessage {
	b, err := marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
