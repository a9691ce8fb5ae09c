package envdpb_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/helmr/helmr/internal/e2b/envdpb/filesystempb"
	"github.com/helmr/helmr/internal/e2b/envdpb/processpb"
)

// generated are the files protoc-gen-go produced, by their descriptor names.
var generated = map[string]protoreflect.FileDescriptor{
	"process/process.proto":       processpb.File_process_process_proto,
	"filesystem/filesystem.proto": filesystempb.File_filesystem_filesystem_proto,
}

// onlyInPython lists the fields the pinned Python SDK has and the pinned npm
// SDK lacks (the two are released apart). Update it when the pins move.
var onlyInPython = []string{"filesystem.EntryInfo.is_symlink"}

func readSet(t *testing.T, name string) *descriptorpb.FileDescriptorSet {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "proto", "e2b", "testdata", name))
	if err != nil {
		t.Fatalf("read golden descriptors: %v", err)
	}
	set := &descriptorpb.FileDescriptorSet{}
	if err := proto.Unmarshal(b, set); err != nil {
		t.Fatalf("unmarshal %s: %v", name, err)
	}
	if len(set.File) != len(generated) {
		t.Fatalf("%s holds %d files, want %d", name, len(set.File), len(generated))
	}
	return set
}

// TestDescriptorsMatchPythonSDK compares, field by field, each generated
// file's descriptor with the one serialized in the Python SDK: names, numbers,
// labels, types, json names, oneofs (proto3 optional included), enums,
// services, streaming kinds and file options.
func TestDescriptorsMatchPythonSDK(t *testing.T) {
	for _, want := range readSet(t, "python-sdk.binpb").File {
		t.Run(want.GetName(), func(t *testing.T) {
			fd, ok := generated[want.GetName()]
			if !ok {
				t.Fatalf("no generated file for %s", want.GetName())
			}
			got := protodesc.ToFileDescriptorProto(fd)
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("generated %s differs from the Python SDK's (-sdk +generated):\n%s", want.GetName(), diff)
			}
		})
	}
}

// TestDescriptorsMatchNPMSDK holds the generated files to the npm SDK's
// embedded descriptors. protobuf-es leaves out default json names and the
// dependency list; the npm SDK may lag the Python one by the fields in
// onlyInPython, and by nothing else.
func TestDescriptorsMatchNPMSDK(t *testing.T) {
	var extra []string
	for _, want := range readSet(t, "npm-sdk.binpb").File {
		t.Run(want.GetName(), func(t *testing.T) {
			fd, ok := generated[want.GetName()]
			if !ok {
				t.Fatalf("no generated file for %s", want.GetName())
			}
			got := protodesc.ToFileDescriptorProto(fd)
			extra = append(extra, dropFieldsMissingFrom(got.GetPackage(), got.MessageType, want.MessageType)...)
			normalize(got)
			normalize(want)
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("generated %s differs from the npm SDK's (-sdk +generated):\n%s", want.GetName(), diff)
			}
		})
	}
	slices.Sort(extra)
	if !slices.Equal(extra, onlyInPython) {
		t.Errorf("fields missing from the npm SDK = %v, want %v", extra, onlyInPython)
	}
}

// dropFieldsMissingFrom removes from got the fields that want's message of the
// same name lacks, and returns their full names.
func dropFieldsMissingFrom(scope string, got, want []*descriptorpb.DescriptorProto) []string {
	var dropped []string
	for _, g := range got {
		i := slices.IndexFunc(want, func(w *descriptorpb.DescriptorProto) bool { return w.GetName() == g.GetName() })
		if i < 0 {
			continue
		}
		w := want[i]
		g.Field = slices.DeleteFunc(g.Field, func(f *descriptorpb.FieldDescriptorProto) bool {
			missing := !slices.ContainsFunc(w.Field, func(x *descriptorpb.FieldDescriptorProto) bool {
				return x.GetNumber() == f.GetNumber()
			})
			if missing {
				dropped = append(dropped, scope+"."+g.GetName()+"."+f.GetName())
			}
			return missing
		})
		dropped = append(dropped, dropFieldsMissingFrom(scope+"."+g.GetName(), g.NestedType, w.NestedType)...)
	}
	return dropped
}

func normalize(f *descriptorpb.FileDescriptorProto) {
	f.Dependency = nil
	var walk func([]*descriptorpb.DescriptorProto)
	walk = func(ms []*descriptorpb.DescriptorProto) {
		for _, m := range ms {
			for _, fl := range m.Field {
				if fl.GetJsonName() == defaultJSONName(fl.GetName()) {
					fl.JsonName = nil
				}
			}
			walk(m.NestedType)
		}
	}
	walk(f.MessageType)
}

// defaultJSONName is protoc's lowerCamelCase of a field name.
func defaultJSONName(name string) string {
	var b strings.Builder
	upper := false
	for _, c := range name {
		switch {
		case c == '_':
			upper = true
		case upper:
			b.WriteString(strings.ToUpper(string(c)))
			upper = false
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}
