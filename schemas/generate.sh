#!/usr/bin/env bash
# Regenerates schemas/imv1 from schemas/proto with pinned generator versions:
# protoc-gen-go and protoc-gen-go-vtproto (MarshalVT/UnmarshalVT/SizeVT, the
# hot paths' fast codec, see schemas/README.md) come from go.mod's tool
# directives, protoc from Debian's
# protobuf-compiler (checked below, since its version lands in the output).
# It also writes schemas/seqflow.binpb, a FileDescriptorSet of every .proto
# with imports and source info (comments), for tools that decode records
# without generated code (protoc --decode, other languages; docs/analytics.md).
# OUT overrides the output folder of both (the staleness tests generate
# into a temp dir).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
want_protoc="libprotoc 3.21.12"
if ! command -v protoc >/dev/null; then
  echo "generate: protoc not found; install Debian's protobuf-compiler (apt-get install protobuf-compiler)" >&2
  exit 1
fi
have=$(protoc --version)
if [ "$have" != "$want_protoc" ]; then
  echo "generate: protoc is '$have', want '$want_protoc' (the version is written into generated files)" >&2
  exit 1
fi
out=${OUT:-$here/imv1}
descriptors=${OUT:-$here}/seqflow.binpb
mkdir -p "$out"
plugin=$(mktemp -d)
trap 'rm -rf "$plugin"' EXIT
(cd "$root" && go build -o "$plugin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go)
(cd "$root" && go build -o "$plugin/protoc-gen-go-vtproto" github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto)
cd "$here/proto"
protoc --plugin=protoc-gen-go="$plugin/protoc-gen-go" \
  --plugin=protoc-gen-go-vtproto="$plugin/protoc-gen-go-vtproto" \
  --go_out="$out" --go_opt=paths=source_relative \
  --go_opt=Mseqflow/im/v1/content.proto=github.com/seqflow/seqflow/schemas/imv1 \
  --go-vtproto_out="$out" --go-vtproto_opt=paths=source_relative,features=marshal+unmarshal+size \
  --go-vtproto_opt=Mseqflow/im/v1/content.proto=github.com/seqflow/seqflow/schemas/imv1 \
  seqflow/im/v1/*.proto
protoc --descriptor_set_out="$descriptors" --include_imports --include_source_info seqflow/im/v1/*.proto
# paths=source_relative keeps the proto folders; flatten into the package folder.
mv "$out"/seqflow/im/v1/*.pb.go "$out"/
rm -rf "$out/seqflow"
