package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"
	"strings"
)

// inputForm is the test page's payload form, built from a task's declared
// input (a JSON Schema): a field per property of simple type of an object
// schema. The JSON editor stays the payload: test.js keeps the two in
// step, and properties without a field are edited there.
type inputForm struct {
	Fields []inputField
	Other  []string // properties the form has no field for, by name
	Schema string   // the schema, pretty, to show
}

// inputField is one property's control.
type inputField struct {
	Name        string
	Label       string
	Description string
	// Kind is string, text (long string), number, integer, boolean or enum.
	Kind     string
	Required bool
	// Options are an enum's values (JSON) and labels.
	Options []inputOption
	// Min, Max, MinLength, MaxLength hint the browser's input (a pattern
	// does not: HTML anchors it and JSON Schema does not).
	Min, Max, MinLength, MaxLength string
}

type inputOption struct{ Value, Label string }

// propSchema is the part of a property's schema the form reads.
type propSchema struct {
	Type        json.RawMessage   `json:"type"`
	Title       string            `json:"title"`
	Description string            `json:"description"`
	Enum        []json.RawMessage `json:"enum"`
	Const       json.RawMessage   `json:"const"`
	Format      string            `json:"format"`
	Minimum     *json.Number      `json:"minimum"`
	Maximum     *json.Number      `json:"maximum"`
	MinLength   *json.Number      `json:"minLength"`
	MaxLength   *json.Number      `json:"maxLength"`
	Default     json.RawMessage   `json:"default"`
}

// buildInputForm reads a task's input schema; nil without one. A schema
// that is not an object with properties gets no fields, only the editor.
func buildInputForm(raw json.RawMessage) *inputForm {
	if len(raw) == 0 {
		return nil
	}
	f := &inputForm{Schema: pretty(raw).Text}
	var top struct {
		Type       json.RawMessage            `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&top) != nil || len(top.Properties) == 0 {
		return f
	}
	if t := schemaType(top.Type); t != "" && t != "object" {
		return f
	}
	required := map[string]bool{}
	for _, r := range top.Required {
		required[r] = true
	}
	names := make([]string, 0, len(top.Properties))
	for n := range top.Properties {
		names = append(names, n)
	}
	// Required fields first, then by name.
	sort.Slice(names, func(i, j int) bool {
		if required[names[i]] != required[names[j]] {
			return required[names[i]]
		}
		return names[i] < names[j]
	})
	for _, n := range names {
		if fld, ok := propField(n, top.Properties[n], required[n]); ok {
			f.Fields = append(f.Fields, fld)
		} else {
			f.Other = append(f.Other, n)
		}
	}
	return f
}

// propField makes a property's control, or false for a type the form
// does not edit (objects, arrays, unions).
func propField(name string, raw json.RawMessage, required bool) (inputField, bool) {
	var p propSchema
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if dec.Decode(&p) != nil {
		return inputField{}, false
	}
	f := inputField{Name: name, Label: name, Description: p.Description, Required: required}
	if p.Title != "" {
		f.Label = p.Title
	}
	num := func(n *json.Number) string {
		if n == nil {
			return ""
		}
		return n.String()
	}
	switch t := schemaType(p.Type); {
	case len(p.Enum) > 0:
		f.Kind = "enum"
		for _, v := range p.Enum {
			label := string(v)
			var s string
			if json.Unmarshal(v, &s) == nil {
				label = s
			}
			f.Options = append(f.Options, inputOption{Value: compact(v), Label: label})
		}
	case len(p.Const) > 0:
		return inputField{}, false
	case t == "string":
		f.Kind = "string"
		if n, err := num64(p.MaxLength); p.Format == "textarea" || (err == nil && n > 200) {
			f.Kind = "text"
		}
		f.MinLength, f.MaxLength = num(p.MinLength), num(p.MaxLength)
	case t == "number" || t == "integer":
		f.Kind = t
		f.Min, f.Max = num(p.Minimum), num(p.Maximum)
	case t == "boolean":
		f.Kind = "boolean"
	default:
		return inputField{}, false
	}
	return f, true
}

// schemaType reads a type keyword: a string, or a list of one type and
// perhaps "null" (a nullable field); "" otherwise.
func schemaType(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(raw, &list) != nil {
		return ""
	}
	var out string
	for _, t := range list {
		if t == "null" {
			continue
		}
		if out != "" {
			return ""
		}
		out = t
	}
	return out
}

// initialPayload is the editor's content for a task with an input and no
// recent payload: an object with the properties' defaults.
func initialPayload(raw json.RawMessage) string {
	var top struct {
		Properties map[string]struct {
			Default json.RawMessage `json:"default"`
		} `json:"properties"`
	}
	if json.Unmarshal(raw, &top) != nil {
		return "{}"
	}
	obj := map[string]json.RawMessage{}
	for n, p := range top.Properties {
		if len(p.Default) > 0 {
			obj[n] = p.Default
		}
	}
	if len(obj) == 0 {
		return "{}"
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return "{}"
	}
	return pretty(b).Text
}

func num64(n *json.Number) (int64, error) {
	if n == nil {
		return 0, errNoNumber
	}
	return n.Int64()
}

var errNoNumber = errors.New("no number")

func compact(raw json.RawMessage) string {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return strings.TrimSpace(string(raw))
	}
	return buf.String()
}
