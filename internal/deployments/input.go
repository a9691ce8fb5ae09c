package deployments

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Input is a task's declared payload schema (TaskManifest.Input),
// compiled: a JSON Schema, draft 2020-12 unless its $schema names another
// draft. It references no other document: a $ref outside the schema is
// refused when it compiles, so the control plane never reads a file or a
// URL on a deployment's behalf.
type Input struct {
	schema *jsonschema.Schema
}

// inputURL is where a compiled input schema lives; relative $refs resolve
// against it and are refused by noLoader.
const inputURL = "helmr:///input.schema.json"

// MaxInputProblems bounds the problems a payload check reports.
const MaxInputProblems = 10

var printer = message.NewPrinter(language.English)

// noLoader refuses to load any document a schema refers to.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, errors.New("an input schema is self-contained: a $ref points inside it (#/$defs/...) and $schema names a known draft")
}

// CompileInput compiles a declared input schema. The error says what is
// wrong with it, in the words of a deployment's field problem.
func CompileInput(raw json.RawMessage) (*Input, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, errors.New("must be a JSON Schema object, such as {\"type\": \"object\", \"properties\": {...}}")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(inputURL, doc); err != nil {
		return nil, fmt.Errorf("does not compile as JSON Schema: %v", err)
	}
	sch, err := c.Compile(inputURL)
	if err != nil {
		return nil, fmt.Errorf("does not compile as JSON Schema: %s", compileMessage(err))
	}
	return &Input{schema: sch}, nil
}

// compileMessage shortens the compiler's error: without the schema's
// internal URL, and for a schema that breaks the meta-schema, each broken
// keyword's place and reason.
func compileMessage(err error) string {
	var se *jsonschema.SchemaValidationError
	if errors.As(err, &se) {
		var ve *jsonschema.ValidationError
		if errors.As(se.Err, &ve) {
			var parts []string
			for _, p := range leafProblems(ve, "schema") {
				parts = append(parts, p.String())
			}
			return strings.Join(parts, "; ")
		}
	}
	msg := strings.ReplaceAll(err.Error(), inputURL+"#", "#")
	return strings.ReplaceAll(msg, inputURL, "the schema")
}

// PayloadProblem is one way a payload does not fit: Path locates the value
// ("payload.repo", "payload.files[2]"); Message says what is wrong.
type PayloadProblem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (p PayloadProblem) String() string { return p.Path + ": " + p.Message }

// Check validates a payload (JSON) against the schema and returns its
// problems, ordered by path, at most MaxInputProblems of them; none when
// it fits.
func (in *Input) Check(payload json.RawMessage) ([]PayloadProblem, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("payload is not valid JSON: %v", err)
	}
	err = in.schema.Validate(v)
	if err == nil {
		return nil, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return nil, fmt.Errorf("check the payload: %w", err)
	}
	ps := leafProblems(ve, "payload")
	if len(ps) > MaxInputProblems {
		ps = ps[:MaxInputProblems]
	}
	return ps, nil
}

// leafProblems flattens a validation error tree to its leaves: the
// keywords that failed, each at the value it failed on. A missing required
// property is reported at the property's own path.
func leafProblems(ve *jsonschema.ValidationError, root string) []PayloadProblem {
	var out []PayloadProblem
	seen := map[PayloadProblem]bool{}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		var ps []PayloadProblem
		if req, ok := e.ErrorKind.(*kind.Required); ok {
			for _, m := range req.Missing {
				ps = append(ps, PayloadProblem{Path: instancePath(root, append(e.InstanceLocation[:len(e.InstanceLocation):len(e.InstanceLocation)], m)), Message: "missing property"})
			}
		} else {
			ps = append(ps, PayloadProblem{Path: instancePath(root, e.InstanceLocation), Message: e.ErrorKind.LocalizedString(printer)})
		}
		for _, p := range ps {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	walk(ve)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// instancePath writes a location as root.name[index]; a name that is not
// an identifier is quoted (payload["a b"]).
func instancePath(root string, loc []string) string {
	var b strings.Builder
	b.WriteString(root)
	for _, tok := range loc {
		switch {
		case isIndex(tok):
			b.WriteString("[" + tok + "]")
		case isIdent(tok):
			b.WriteString("." + tok)
		default:
			b.WriteString("[" + strconv.Quote(tok) + "]")
		}
	}
	return b.String()
}

func isIndex(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		ok := r == '_' || r == '$' || r == '-' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return true
}
