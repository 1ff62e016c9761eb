package docker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// object is a JSON object with its members in file order and their values
// as the exact bytes of the file, so that editing one member leaves the
// others byte for byte as the administrator wrote them.
type object struct {
	members []member
}

type member struct {
	key string
	raw json.RawMessage
}

// parseObject reads a JSON object; empty input (or only whitespace) is an
// empty object, as dockerd treats an empty daemon.json.
func parseObject(b []byte) (*object, error) {
	o := &object{}
	if len(bytes.TrimSpace(b)) == 0 {
		return o, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key := tok.(string) // inside an object the decoder only yields string keys
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("value of %q: %w", key, err)
		}
		if seen[key] {
			return nil, fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		o.members = append(o.members, member{key, raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON object")
	}
	return o, nil
}

func (o *object) get(key string) (json.RawMessage, bool) {
	for _, m := range o.members {
		if m.key == key {
			return m.raw, true
		}
	}
	return nil, false
}

// set replaces key's value in place, or appends it.
func (o *object) set(key string, raw json.RawMessage) {
	for i, m := range o.members {
		if m.key == key {
			o.members[i].raw = raw
			return
		}
	}
	o.members = append(o.members, member{key, raw})
}

func (o *object) delete(key string) bool {
	for i, m := range o.members {
		if m.key == key {
			o.members = append(o.members[:i], o.members[i+1:]...)
			return true
		}
	}
	return false
}

// render writes the object with one member per line, indented by indent
// spaces per level; member values are written as stored.
func (o *object) render(level int) []byte {
	if len(o.members) == 0 {
		return []byte("{}")
	}
	pad := bytes.Repeat([]byte("  "), level+1)
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, m := range o.members {
		k, _ := json.Marshal(m.key)
		b.Write(pad)
		b.Write(k)
		b.WriteString(": ")
		b.Write(m.raw)
		if i < len(o.members)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.Write(pad[:len(pad)-2])
	b.WriteByte('}')
	return b.Bytes()
}

// equalJSON reports whether two documents hold the same JSON value.
func equalJSON(a, b []byte) bool {
	var va, vb any
	if len(bytes.TrimSpace(a)) == 0 {
		a = []byte("{}")
	}
	if len(bytes.TrimSpace(b)) == 0 {
		b = []byte("{}")
	}
	da := json.NewDecoder(bytes.NewReader(a))
	da.UseNumber()
	db := json.NewDecoder(bytes.NewReader(b))
	db.UseNumber()
	if da.Decode(&va) != nil || db.Decode(&vb) != nil {
		return false
	}
	return jsonEqual(va, vb)
}

func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}
