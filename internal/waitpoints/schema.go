package waitpoints

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// The schema check is deliberately small: a human wait's schema is a JSON
// Schema, and Helmr checks the parts that catch a wrong answer early —
// the top-level "type", "required" properties of an object, the "type" of
// each listed property present in the data, and a top-level "enum".
// Everything else in the schema is kept for the person answering and not
// enforced.

var schemaTypes = []string{"object", "array", "string", "number", "integer", "boolean", "null"}

// checkSchema rejects a schema whose checked keywords are malformed.
func checkSchema(s map[string]any) error {
	if err := checkTypeKeyword(s["type"]); err != nil {
		return err
	}
	if req, ok := s["required"]; ok {
		list, ok := req.([]any)
		if !ok {
			return fmt.Errorf("required must be an array of property names")
		}
		for _, r := range list {
			if _, ok := r.(string); !ok {
				return fmt.Errorf("required must be an array of property names")
			}
		}
	}
	if props, ok := s["properties"]; ok {
		m, ok := props.(map[string]any)
		if !ok {
			return fmt.Errorf("properties must be an object")
		}
		for name, p := range m {
			ps, ok := p.(map[string]any)
			if !ok {
				return fmt.Errorf("property %q must be a schema object", name)
			}
			if err := checkTypeKeyword(ps["type"]); err != nil {
				return fmt.Errorf("property %q: %w", name, err)
			}
		}
	}
	if e, ok := s["enum"]; ok {
		if _, ok := e.([]any); !ok {
			return fmt.Errorf("enum must be an array")
		}
	}
	return nil
}

func checkTypeKeyword(t any) error {
	switch v := t.(type) {
	case nil:
		return nil
	case string:
		if !slices.Contains(schemaTypes, v) {
			return fmt.Errorf("unknown type %q", v)
		}
		return nil
	case []any:
		for _, e := range v {
			if err := checkTypeKeyword(e); err != nil || e == nil {
				return fmt.Errorf("type must be a type name or an array of them")
			}
		}
		return nil
	}
	return fmt.Errorf("type must be a type name or an array of them")
}

// checkData checks canonical JSON data against schema (see above).
func checkData(schema, data json.RawMessage) error {
	var s map[string]any
	if err := json.Unmarshal(schema, &s); err != nil {
		return fmt.Errorf("the stored schema is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("data is not JSON")
	}
	if err := matchType("the data", s["type"], v); err != nil {
		return err
	}
	if e, ok := s["enum"].([]any); ok {
		found := false
		for _, want := range e {
			wb, _ := json.Marshal(want)
			if c, err := canonical(wb); err == nil && bytes.Equal(c, data) {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("the data is not one of the schema's enum values")
		}
	}
	obj, isObj := v.(map[string]any)
	if !isObj {
		return nil
	}
	if req, ok := s["required"].([]any); ok {
		var missing []string
		for _, r := range req {
			if _, ok := obj[r.(string)]; !ok {
				missing = append(missing, r.(string))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("required properties missing: %s", strings.Join(missing, ", "))
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for name, p := range props {
			val, present := obj[name]
			if !present {
				continue
			}
			if err := matchType("property "+name, p.(map[string]any)["type"], val); err != nil {
				return err
			}
		}
	}
	return nil
}

// matchType checks v against a "type" keyword (a name or a list of names).
func matchType(what string, t, v any) error {
	var names []string
	switch tt := t.(type) {
	case nil:
		return nil
	case string:
		names = []string{tt}
	case []any:
		for _, e := range tt {
			names = append(names, e.(string))
		}
	}
	got := jsonType(v)
	for _, n := range names {
		if n == got || (n == "number" && got == "integer") {
			return nil
		}
	}
	return fmt.Errorf("%s is %s, want %s", what, article(got), strings.Join(names, " or "))
}

func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	}
	return "object"
}

func article(t string) string {
	switch t {
	case "null":
		return "null"
	case "object", "array", "integer":
		return "an " + t
	}
	return "a " + t
}
