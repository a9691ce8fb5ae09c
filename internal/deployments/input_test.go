package deployments

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/helmr/helmr/internal/errdefs"
)

const reviewInput = `{
	"type": "object",
	"properties": {
		"repo": {"type": "string", "minLength": 1},
		"pr": {"type": "integer", "minimum": 1},
		"labels": {"type": "array", "items": {"type": "string"}},
		"mode": {"enum": ["fast", "thorough"]},
		"owner": {"$ref": "#/$defs/person"},
		"odd key": {"type": "boolean"}
	},
	"required": ["repo", "pr"],
	"additionalProperties": false,
	"$defs": {"person": {"type": "object", "required": ["login"], "properties": {"login": {"type": "string"}}}}
}`

func TestInputCheck(t *testing.T) {
	in, err := CompileInput(json.RawMessage(reviewInput))
	if err != nil {
		t.Fatalf("CompileInput = %v", err)
	}
	for _, tc := range []struct {
		payload string
		want    []PayloadProblem
	}{
		{`{"repo": "helmr/helmr", "pr": 7}`, nil},
		{`{"repo": "a", "pr": 1, "labels": ["x"], "mode": "fast", "owner": {"login": "ann"}, "odd key": true}`, nil},
		{`{"pr": 7}`, []PayloadProblem{{"payload.repo", "missing property"}}},
		{`{}`, []PayloadProblem{{"payload.pr", "missing property"}, {"payload.repo", "missing property"}}},
		{`{"repo": "", "pr": 0}`, []PayloadProblem{{"payload.pr", "minimum: got 0, want 1"}, {"payload.repo", "minLength: got 0, want 1"}}},
		{`{"repo": "a", "pr": "7"}`, []PayloadProblem{{"payload.pr", "got string, want integer"}}},
		{`{"repo": "a", "pr": 1.5}`, []PayloadProblem{{"payload.pr", "got number, want integer"}}},
		{`{"repo": "a", "pr": 1, "labels": ["x", 3]}`, []PayloadProblem{{"payload.labels[1]", "got number, want string"}}},
		{`{"repo": "a", "pr": 1, "owner": {}}`, []PayloadProblem{{"payload.owner.login", "missing property"}}},
		{`{"repo": "a", "pr": 1, "odd key": 1}`, []PayloadProblem{{`payload["odd key"]`, "got number, want boolean"}}},
		{`{"repo": "a", "pr": 1, "mode": "slow"}`, []PayloadProblem{{"payload.mode", "value must be one of 'fast', 'thorough'"}}},
		{`{"repo": "a", "pr": 1, "extra": 1}`, []PayloadProblem{{"payload", "additional properties 'extra' not allowed"}}},
		{`null`, []PayloadProblem{{"payload", "got null, want object"}}},
		{`[1]`, []PayloadProblem{{"payload", "got array, want object"}}},
	} {
		got, err := in.Check(json.RawMessage(tc.payload))
		if err != nil {
			t.Fatalf("Check(%s) error %v", tc.payload, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Check(%s) problems (-want +got):\n%s", tc.payload, diff)
		}
	}
}

// TestInputCheckBounded: a payload with many problems reports at most
// MaxInputProblems of them.
func TestInputCheckBounded(t *testing.T) {
	in, err := CompileInput(json.RawMessage(`{"type": "array", "items": {"type": "string"}}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := in.Check(json.RawMessage(`[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]`))
	if err != nil || len(got) != MaxInputProblems {
		t.Fatalf("Check(15 bad items) = %d problems (%v), want %d", len(got), err, MaxInputProblems)
	}
}

func TestCompileInputRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, schema, want string
	}{
		{"not JSON", `{"type":`, "not valid JSON"},
		{"not an object", `["string"]`, "must be a JSON Schema object"},
		{"a boolean", `true`, "must be a JSON Schema object"},
		{"unknown type", `{"type": "strin"}`, "does not compile as JSON Schema"},
		{"required not a list", `{"type": "object", "required": "repo"}`, "schema.required"},
		{"minimum not a number", `{"type": "integer", "minimum": "1"}`, "schema.minimum"},
		{"a file ref", `{"$ref": "file:///etc/passwd"}`, "self-contained"},
		{"a remote ref", `{"properties": {"a": {"$ref": "https://example.com/s.json"}}}`, "self-contained"},
		{"a relative ref", `{"$ref": "other.json"}`, "self-contained"},
		{"a dangling pointer", `{"$ref": "#/$defs/nope"}`, "does not compile"},
		{"an unknown meta-schema", `{"$schema": "https://example.com/meta", "type": "object"}`, "does not compile"},
		{"a pattern RE2 cannot run", `{"type": "string", "pattern": "^a(?=b)"}`, "does not compile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CompileInput(json.RawMessage(tc.schema))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CompileInput(%s) = %v, want an error containing %q", tc.schema, err, tc.want)
			}
			if strings.Contains(err.Error(), inputURL) {
				t.Errorf("CompileInput(%s) = %v: names the internal URL", tc.schema, err)
			}
		})
	}
}

// TestCompileInputDrafts: a schema in draft-07 (as some exporters write)
// compiles, and its keywords apply.
func TestCompileInputDrafts(t *testing.T) {
	in, err := CompileInput(json.RawMessage(`{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "required": ["a"], "definitions": {"s": {"type": "string"}}, "properties": {"a": {"$ref": "#/definitions/s"}}}`))
	if err != nil {
		t.Fatalf("CompileInput(draft-07) = %v", err)
	}
	got, err := in.Check(json.RawMessage(`{"a": 1}`))
	if want := []PayloadProblem{{"payload.a", "got number, want string"}}; err != nil || !cmp.Equal(got, want) {
		t.Errorf("Check = %v (%v), want %v", got, err, want)
	}
}

func TestValidateInput(t *testing.T) {
	m := imageTask(&ImageManifest{Name: "i", Steps: []Step{{Kind: StepFrom, Ref: "node:24"}}})
	m.Tasks[0].Input = json.RawMessage(reviewInput)
	if err := m.Validate(nil); err != nil {
		t.Fatalf("Validate(a good input) = %v", err)
	}
	m.Tasks[0].Input = json.RawMessage(`{"type": "object", "properties": {"a": {"type": "text"}}}`)
	err := m.Validate(nil)
	var ve *ValidationError
	if !errors.Is(err, errdefs.ErrInvalid) || !errors.As(err, &ve) {
		t.Fatalf("Validate(a bad input) = %v, want a ValidationError", err)
	}
	if p := ve.Problems[0]; p.Task != "t" || p.Field != "input" || !strings.Contains(p.Message, "does not compile as JSON Schema") {
		t.Errorf("problem = %+v, want task t, field input, does not compile", p)
	}
}
