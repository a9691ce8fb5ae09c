package console

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const testInput = `{
	"type": "object",
	"properties": {
		"repo": {"type": "string", "title": "Repository", "description": "owner/name` + xss + `", "minLength": 1},
		"pr": {"type": "integer", "minimum": 1},
		"depth": {"type": ["number", "null"], "default": 2},
		"draft": {"type": "boolean"},
		"mode": {"enum": ["fast", "thorough` + xss + `", 3]},
		"notes": {"type": "string", "maxLength": 5000},
		"labels": {"type": "array", "items": {"type": "string"}},
		"owner": {"type": "object"}
	},
	"required": ["repo", "pr"]
}`

func TestBuildInputForm(t *testing.T) {
	f := buildInputForm(json.RawMessage(testInput))
	if f == nil {
		t.Fatal("buildInputForm = nil")
	}
	type row struct {
		Name, Label, Kind string
		Required          bool
	}
	var got []row
	for _, fld := range f.Fields {
		got = append(got, row{fld.Name, fld.Label, fld.Kind, fld.Required})
	}
	want := []row{
		{"pr", "pr", "integer", true}, {"repo", "Repository", "string", true},
		{"depth", "depth", "number", false}, {"draft", "draft", "boolean", false},
		{"mode", "mode", "enum", false}, {"notes", "notes", "text", false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"labels", "owner"}, f.Other); diff != "" {
		t.Errorf("other properties (-want +got):\n%s", diff)
	}
	if mode := f.Fields[4]; len(mode.Options) != 3 || mode.Options[0] != (inputOption{`"fast"`, "fast"}) || mode.Options[2] != (inputOption{"3", "3"}) {
		t.Errorf("mode options = %v", mode.Options)
	}
	if pr := f.Fields[0]; pr.Min != "1" {
		t.Errorf("pr min = %q, want 1", pr.Min)
	}
	if got := initialPayload(json.RawMessage(testInput)); got != "{\n  \"depth\": 2\n}" {
		t.Errorf("initialPayload = %q, want the defaults", got)
	}
	for _, s := range []string{`{"type": "array"}`, `{"type": "object"}`, `"nope"`} {
		if f := buildInputForm(json.RawMessage(s)); f == nil || len(f.Fields) != 0 {
			t.Errorf("buildInputForm(%s) = %+v, want a form without fields", s, f)
		}
	}
	if buildInputForm(nil) != nil {
		t.Errorf("buildInputForm(nil) != nil")
	}
}

// TestTestPageInputForm: a task with an input gets a field per simple
// property, its schema and texts escaped; a task without one does not.
func TestTestPageInputForm(t *testing.T) {
	api := fakeTest(map[string]any{"kind": "owner"})
	api.answers["/v1/tasks"] = map[string]any{"tasks": []map[string]any{
		{"id": "typed", "deploymentVersion": 1, "spec": map[string]any{"input": json.RawMessage(testInput)}},
		{"id": "fix", "deploymentVersion": 1, "spec": map[string]any{}},
	}}
	api.answers["/v1/runs"] = map[string]any{"runs": []any{}}
	c := New(api, slog.New(slog.DiscardHandler))
	rec := get(t, c, "/test?project=p&env=dev&task=typed")
	body := rec.Body.String()
	if rec.Code != http.StatusOK || strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
		t.Fatalf("GET /test = %d %s", rec.Code, body)
	}
	for _, want := range []string{
		`id="payload-form"`, `data-field="repo" data-kind="string"`, `Repository<span class="req"> (required)</span>`,
		`data-field="pr" data-kind="integer"`, `min="1"`, `data-field="draft" data-kind="boolean"`,
		`data-field="mode" data-kind="enum"`, `<option value="&#34;fast&#34;">fast</option>`,
		`<textarea id="in-5" rows="4" data-field="notes"`, `<code>labels</code>, <code>owner</code>`,
		`<summary>Input schema</summary>`, "owner/name&lt;script&gt;",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the test page lacks %s", want)
		}
	}
	if !strings.Contains(body, "&#34;depth&#34;: 2") {
		t.Errorf("the editor does not start with the schema's defaults")
	}
	if body := get(t, c, "/test?project=p&env=dev&task=fix").Body.String(); strings.Contains(body, `id="payload-form"`) || strings.Contains(body, "Input schema") {
		t.Errorf("a task without input has a payload form")
	}
}
