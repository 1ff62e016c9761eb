package task

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

func loadSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	schemaOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		schema, schemaErr = c.Compile("task.schema.json")
	})
	if schemaErr != nil {
		t.Fatalf("task.schema.json does not compile: %v", schemaErr)
	}
	return schema
}

func schemaAccepts(t testing.TB, data []byte) error {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return loadSchema(t).Validate(inst)
}

// TestSchemaAgreesWithLoader keeps task.schema.json and the Go loader in
// step: every example and every valid case passes both; every bad case is
// refused by both, except the few marked loaderOnly (duplicate keys,
// duration bounds, files that must exist), which a schema cannot express
// and the schema's description lists.
func TestSchemaAgreesWithLoader(t *testing.T) {
	dir := taskDir(t)
	examples, err := filepath.Glob("../../examples/*/" + FileName)
	if err != nil {
		t.Fatal(err)
	}
	if len(examples) == 0 {
		t.Fatal("no examples/*/task.json found; the examples must be validated against the schema")
	}
	for _, ex := range examples {
		t.Run("example "+ex, func(t *testing.T) {
			data, err := os.ReadFile(ex)
			if err != nil {
				t.Fatal(err)
			}
			if err := schemaAccepts(t, data); err != nil {
				t.Errorf("schema refuses %s: %v", ex, err)
			}
			if _, err := Load(filepath.Dir(ex)); err != nil {
				t.Errorf("loader refuses %s: %v", ex, err)
			}
		})
	}
	for _, tt := range goodTasks(dir) {
		t.Run("good "+tt.name, func(t *testing.T) {
			if err := schemaAccepts(t, []byte(tt.json)); err != nil {
				t.Errorf("schema refuses a task the loader accepts: %v", err)
			}
		})
	}
	for _, tt := range badTasks {
		t.Run("bad "+tt.name, func(t *testing.T) {
			if _, err := Parse("task.json", dir, []byte(tt.json)); err == nil {
				t.Fatal("loader accepts it")
			}
			err := schemaAccepts(t, []byte(tt.json))
			switch {
			case tt.loaderOnly && err != nil:
				t.Errorf("marked loaderOnly but the schema refuses it too (%v): drop the mark", err)
			case !tt.loaderOnly && err == nil:
				t.Error("schema accepts a task the loader refuses")
			}
		})
	}
}
