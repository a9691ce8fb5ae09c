package channel

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

const (
	schemaFile = "../../../proto/adapter-channel.schema.json"
	goldenFile = "../../../proto/adapter-channel.golden.json"
	schemaID   = "https://helmr.dev/proto/adapter-channel.schema.json"
)

// shape is what a method's params and result decode into (result nil: the
// method answers null).
type shape struct {
	params func() any
	result func() any
}

var shapes = map[Method]shape{
	MethodWaitHuman:           {func() any { return new(WaitHumanParams) }, func() any { return new(WaitResult) }},
	MethodWaitCreateToken:     {func() any { return new(CreateTokenParams) }, func() any { return new(TokenResult) }},
	MethodWaitForToken:        {func() any { return new(ForTokenParams) }, func() any { return new(WaitResult) }},
	MethodWaitFor:             {func() any { return new(WaitForParams) }, nil},
	MethodWaitUntil:           {func() any { return new(WaitUntilParams) }, nil},
	MethodSessionInputNext:    {func() any { return new(InputNextParams) }, func() any { return new(InputRecords) }},
	MethodSessionOutputAppend: {func() any { return new(OutputAppendParams) }, func() any { return new(AppendResult) }},
	MethodMetadataSet:         {func() any { return new(MetadataSetParams) }, nil},
	MethodTasksTrigger:        {func() any { return new(TriggerParams) }, func() any { return new(TriggerResult) }},
	MethodTasksTriggerAndWait: {func() any { return new(TriggerParams) }, func() any { return new(WaitResult) }},
}

// TestGoldensRoundTrip decodes every golden message into this package's
// types and encodes it again: the encoding must be the golden (nothing
// lost or added) and valid against the schema, as the golden itself.
func TestGoldensRoundTrip(t *testing.T) {
	sch := compileSchema(t)
	for kind, msgs := range loadGoldens(t) {
		for i, golden := range msgs {
			t.Run(kind+"/"+strconv.Itoa(i), func(t *testing.T) {
				def := kind
				if kind == "response.error" {
					def = "response"
				}
				validate(t, sch(""), golden, "the golden, against the schema")
				validate(t, sch(def), golden, "the golden, against $defs/"+def)
				got := reencode(t, kind, golden)
				if diff := cmp.Diff(decodeAny(t, golden), decodeAny(t, got)); diff != "" {
					t.Errorf("re-encoded %s differs from the golden (-golden +Go):\n%s", kind, diff)
				}
				validate(t, sch(def), got, "the Go encoding, against $defs/"+def)
			})
		}
	}
}

// reencode decodes golden as a message of kind and encodes it back the way
// the worker does.
func reencode(t *testing.T, kind string, golden []byte) []byte {
	t.Helper()
	switch kind {
	case string(TypeStart):
		return roundTrip[Start](t, golden)
	case string(TypeResult):
		return roundTrip[Result](t, golden)
	case string(TypeError):
		return roundTrip[Error](t, golden)
	case "response.error":
		resp := decode[Response](t, golden)
		if resp.Error == nil {
			t.Fatalf("%s has no error", golden)
		}
		if resp.Error.Name == "" { // the worker's own errors carry no name
			b, err := Answer(resp.ID, nil, errors.New(resp.Error.Message))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		return roundTrip[Response](t, golden)
	}
	dir, method, _ := strings.Cut(kind, ".")
	sh, ok := shapes[Method(method)]
	if !ok {
		t.Fatalf("golden kind %q names no method of this package", kind)
	}
	switch dir {
	case string(TypeRequest):
		req := decode[Request](t, golden)
		if req.Type != TypeRequest || req.Method != Method(method) {
			t.Fatalf("%s is not a %s request", golden, method)
		}
		params := sh.params()
		strictDecode(t, req.Params, params)
		req.Params = encode(t, params)
		return encode(t, req)
	case string(TypeResponse):
		resp := decode[Response](t, golden)
		var result any
		if sh.result != nil {
			result = sh.result()
			strictDecode(t, resp.Result, result)
		} else if string(resp.Result) != "null" {
			t.Fatalf("%s answers %s, want null", method, resp.Result)
		}
		b, err := Answer(resp.ID, result, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Fatalf("unknown golden kind %q", kind)
	return nil
}

// TestEveryKindIsDescribed fails when a message type or request method
// declared in this package lacks its schema definitions or its goldens, or
// when the schema or the goldens describe one the package does not declare.
func TestEveryKindIsDescribed(t *testing.T) {
	types, methods := declared(t)
	if got, want := slices.Sorted(slices.Values(Methods)), slices.Sorted(slices.Values(methods)); !slices.Equal(got, want) {
		t.Errorf("Methods = %v, want every Method constant %v", got, want)
	}
	if got, want := slices.Sorted(maps.Keys(shapes)), slices.Sorted(slices.Values(methods)); !slices.Equal(got, want) {
		t.Errorf("the test's shapes cover %v, want every method %v", got, want)
	}
	wantGoldens := []string{"response.error"}
	wantDefs := []string{}
	for _, ty := range types {
		wantDefs = append(wantDefs, string(ty))
		if ty != TypeRequest && ty != TypeResponse {
			wantGoldens = append(wantGoldens, string(ty))
		}
	}
	for _, m := range methods {
		wantDefs = append(wantDefs, "request."+string(m), "response."+string(m))
		wantGoldens = append(wantGoldens, "request."+string(m), "response."+string(m))
	}
	goldens := loadGoldens(t)
	for k, msgs := range goldens {
		if len(msgs) == 0 {
			t.Errorf("golden %q has no message", k)
		}
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(wantGoldens)), slices.Sorted(maps.Keys(goldens))); diff != "" {
		t.Errorf("golden kinds vs the package's types and methods (-declared +golden):\n%s", diff)
	}
	var doc struct {
		Defs map[string]json.RawMessage `json:"$defs"`
	}
	if err := json.Unmarshal(readFile(t, schemaFile), &doc); err != nil {
		t.Fatal(err)
	}
	var kinds []string // the schema's definitions of message types and methods
	for name := range doc.Defs {
		dir, _, _ := strings.Cut(name, ".")
		if slices.Contains(types, Type(dir)) {
			kinds = append(kinds, name)
		}
	}
	if diff := cmp.Diff(slices.Sorted(slices.Values(wantDefs)), slices.Sorted(slices.Values(kinds))); diff != "" {
		t.Errorf("schema definitions vs the package's types and methods (-declared +schema):\n%s", diff)
	}
}

// declared returns the Type and Method constants of this package's source.
func declared(t *testing.T) ([]Type, []Method) {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []Type
	var methods []Method
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			ast.Inspect(f, func(n ast.Node) bool {
				vs, ok := n.(*ast.ValueSpec)
				if !ok || vs.Type == nil || len(vs.Values) != len(vs.Names) {
					return true
				}
				typ, _ := vs.Type.(*ast.Ident)
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || typ == nil {
						continue
					}
					s, _ := strconv.Unquote(lit.Value)
					switch typ.Name {
					case "Type":
						types = append(types, Type(s))
					case "Method":
						methods = append(methods, Method(s))
					}
				}
				return true
			})
		}
	}
	if len(types) == 0 || len(methods) == 0 {
		t.Fatalf("found types %v and methods %v in the source, want both", types, methods)
	}
	return types, methods
}

// compileSchema returns the schema's definition def ("" for the schema).
func compileSchema(t *testing.T) func(def string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(readFile(t, schemaFile)))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(schemaID, doc); err != nil {
		t.Fatal(err)
	}
	return func(def string) *jsonschema.Schema {
		t.Helper()
		loc := schemaID
		if def != "" {
			loc += "#/$defs/" + def
		}
		sch, err := c.Compile(loc)
		if err != nil {
			t.Fatalf("compile %s: %v", loc, err)
		}
		return sch
	}
}

func validate(t *testing.T, sch *jsonschema.Schema, msg []byte, what string) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("%s: %s is not valid: %v", what, msg, err)
	}
}

func loadGoldens(t *testing.T) map[string][]json.RawMessage {
	t.Helper()
	var g map[string][]json.RawMessage
	if err := json.Unmarshal(readFile(t, goldenFile), &g); err != nil {
		t.Fatalf("parse %s: %v", goldenFile, err)
	}
	return g
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func roundTrip[T any](t *testing.T, golden []byte) []byte {
	t.Helper()
	v := decode[T](t, golden)
	return encode(t, v)
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	strictDecode(t, b, &v)
	return v
}

// strictDecode decodes b into v, refusing fields v does not have.
func strictDecode(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s into %T: %v", b, v, err)
	}
}

func encode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return v
}
