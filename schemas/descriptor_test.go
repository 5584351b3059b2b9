package schemas_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	_ "github.com/seqflow/seqflow/schemas/imv1" // registers the compiled-in descriptors
)

// descriptorSet is the committed FileDescriptorSet of schemas/proto.
const descriptorSet = "seqflow.binpb"

// TestDescriptorSetIsFresh fails when the committed descriptor set differs
// from what generate.sh makes of the .proto files: run `go tool task
// generate` and commit.
func TestDescriptorSetIsFresh(t *testing.T) {
	out := generate(t)
	want, err := os.ReadFile(filepath.Join(out, descriptorSet))
	if err != nil {
		t.Fatalf("generate.sh wrote no %s: %v", descriptorSet, err)
	}
	have, err := os.ReadFile(descriptorSet)
	if err != nil {
		t.Fatalf("schemas/%s missing: run `go tool task generate` and commit", descriptorSet)
	}
	if !bytes.Equal(want, have) {
		t.Errorf("schemas/%s is stale: run `go tool task generate` and commit", descriptorSet)
	}
}

// TestDescriptorSetMatchesGeneratedCode checks, without protoc, that the
// committed descriptor set describes the same schema as the generated Go
// (which TestGeneratedCodeIsFresh holds to the .proto files): every file
// of one is in the other and equal but for comments (source info) and
// json_name, which protoc fills in only for its plugins.
func TestDescriptorSetMatchesGeneratedCode(t *testing.T) {
	b, err := os.ReadFile(descriptorSet)
	if err != nil {
		t.Fatalf("schemas/%s missing: run `go tool task generate` and commit", descriptorSet)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatalf("schemas/%s: %v", descriptorSet, err)
	}
	inSet := map[string]bool{}
	for _, f := range set.GetFile() {
		inSet[f.GetName()] = true
		if f.GetSourceCodeInfo() == nil {
			t.Errorf("%s has no source info: generate.sh must pass --include_source_info", f.GetName())
		}
		fd, err := protoregistry.GlobalFiles.FindFileByPath(f.GetName())
		if err != nil {
			t.Errorf("%s is in the descriptor set but not in the generated Go: run `go tool task generate`", f.GetName())
			continue
		}
		if got, want := strip(f), strip(protodesc.ToFileDescriptorProto(fd)); !proto.Equal(got, want) {
			t.Errorf("%s differs between the descriptor set and the generated Go: run `go tool task generate` and commit", f.GetName())
		}
	}
	protoregistry.GlobalFiles.RangeFilesByPackage("seqflow.im.v1", func(fd protoreflect.FileDescriptor) bool {
		if !inSet[fd.Path()] {
			t.Errorf("%s is in the generated Go but not in the descriptor set: run `go tool task generate` and commit", fd.Path())
		}
		return true
	})
	// Files resolve on their own: a tool gets every import from the set.
	if _, err := protodesc.NewFiles(&set); err != nil {
		t.Errorf("descriptor set does not resolve on its own: %v", err)
	}
}

// strip returns f without what only one of protoc's two outputs carries.
func strip(f *descriptorpb.FileDescriptorProto) *descriptorpb.FileDescriptorProto {
	f = proto.Clone(f).(*descriptorpb.FileDescriptorProto)
	f.SourceCodeInfo = nil
	var msgs func([]*descriptorpb.DescriptorProto)
	msgs = func(ms []*descriptorpb.DescriptorProto) {
		for _, m := range ms {
			for _, fd := range m.Field {
				fd.JsonName = nil
			}
			msgs(m.NestedType)
		}
	}
	msgs(f.MessageType)
	return f
}
