// Package fctest checks request bodies against Firecracker's API as its
// published document defines it: the JSON Schema transcribed from it in
// ../testdata/firecracker-api.schema.json (see that file's $comment). It
// is for tests only; it imports nothing of package firecracker, so that
// package's own tests and the microvm tier's can both use it.
package fctest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaID is the transcription's $id.
const schemaID = "https://helmr.dev/testdata/firecracker-api.schema.json"

// SchemaFile is the transcription's path.
func SchemaFile() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "firecracker-api.schema.json")
}

// Schema is the transcription: its definitions, compiled on demand, and
// the requests (x-paths) each is the body of.
type Schema struct {
	c     *jsonschema.Compiler
	paths []path
	// Raw is the file as JSON.
	Raw map[string]any
}

type path struct {
	method, template, def string
}

// matches reports whether p fits the document's path template: a
// {parameter} segment stands for any one non-empty segment.
func (p path) matches(method, reqPath string) bool {
	want, got := strings.Split(p.template, "/"), strings.Split(reqPath, "/")
	if method != p.method || len(want) != len(got) {
		return false
	}
	for i := range want {
		if strings.HasPrefix(want[i], "{") {
			if got[i] == "" {
				return false
			}
		} else if want[i] != got[i] {
			return false
		}
	}
	return true
}

// Load reads and compiles the transcription, failing t if it cannot.
func Load(t testing.TB) *Schema {
	t.Helper()
	data, err := os.ReadFile(SchemaFile())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(schemaID, doc); err != nil {
		t.Fatal(err)
	}
	s := &Schema{c: c}
	if err := json.Unmarshal(data, &s.Raw); err != nil {
		t.Fatal(err)
	}
	for k, def := range s.Raw["x-paths"].(map[string]any) {
		method, tmpl, _ := strings.Cut(k, " ")
		s.paths = append(s.paths, path{method, tmpl, def.(string)})
	}
	return s
}

// Def names the definition of the body of method on reqPath; an error if
// Firecracker's document has no such request.
func (s *Schema) Def(method, reqPath string) (string, error) {
	for _, p := range s.paths {
		if p.matches(method, reqPath) {
			return p.def, nil
		}
	}
	return "", fmt.Errorf("%s %s: no such request in Firecracker's API document", method, reqPath)
}

// Check validates body (JSON) as the body of method on reqPath.
func (s *Schema) Check(method, reqPath string, body []byte) error {
	def, err := s.Def(method, reqPath)
	if err != nil {
		return err
	}
	sch, err := s.c.Compile(schemaID + "#/$defs/" + def)
	if err != nil {
		return fmt.Errorf("compile %s: %w", def, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %s: body %s is no JSON: %w", method, reqPath, body, err)
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Errorf("%s %s body %s does not match Firecracker's %s:\n%w", method, reqPath, body, def, err)
	}
	return nil
}
