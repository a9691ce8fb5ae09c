#!/usr/bin/env bash
# Regenerates E2B's envd protocol as Go code (issue 19).
#
#   1. installs the pinned PyPI and npm e2b SDKs into a scratch directory and
#      recovers process.proto and filesystem.proto from their serialized
#      descriptors (scripts/e2b-proto-extract.py) into proto/e2b/, with the
#      golden descriptor sets in proto/e2b/testdata/;
#   2. generates Go with protoc, protoc-gen-go and protoc-gen-connect-go into
#      internal/e2b/envdpb/.
#
# Needs: python3 (with venv), npm, go, and protoc (Debian: protobuf-compiler;
# installed with apt-get when missing and running as root).
# Pins: change them here, rerun, and review the diff (the header of each
# .proto and proto/e2b/README.md name the versions too).
set -euo pipefail

E2B_PY_VERSION=2.63.0
E2B_NPM_VERSION=2.51.0
PROTOBUF_PY_VERSION=7.36.2
PROTOC_GEN_GO_VERSION=v1.36.12      # google.golang.org/protobuf
PROTOC_GEN_CONNECT_GO_VERSION=v1.21.1 # connectrpc.com/connect

root=$(cd "$(dirname "$0")/.." && pwd)
module=github.com/helmr/helmr
out_go=internal/e2b/envdpb
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! command -v protoc >/dev/null; then
	if [ "$(id -u)" = 0 ]; then
		apt-get update -qq && apt-get install -y -qq protobuf-compiler >/dev/null
	else
		echo "gen-e2b-proto: protoc missing: apt-get install protobuf-compiler" >&2
		exit 1
	fi
fi

echo "gen-e2b-proto: e2b $E2B_PY_VERSION (PyPI), e2b $E2B_NPM_VERSION (npm)"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check \
	"e2b==$E2B_PY_VERSION" "protobuf==$PROTOBUF_PY_VERSION"
site=$("$work/venv/bin/python" -c 'import e2b, os; print(os.path.dirname(os.path.dirname(e2b.__file__)))')
(cd "$work" && npm pack --silent "e2b@$E2B_NPM_VERSION" >/dev/null && tar xzf "e2b-$E2B_NPM_VERSION.tgz")

"$work/venv/bin/python" "$root/scripts/e2b-proto-extract.py" \
	"$site" "$work/package" "$root/proto/e2b" "$E2B_PY_VERSION" "$E2B_NPM_VERSION"

GOBIN="$work/bin" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
GOBIN="$work/bin" go install "connectrpc.com/connect/cmd/protoc-gen-connect-go@$PROTOC_GEN_CONNECT_GO_VERSION"

# The recovered files keep E2B's descriptor names (process/process.proto, ...)
# and carry no go_package; the M options place them in Helmr's tree instead,
# so the .proto text stays byte-for-byte what the SDKs describe.
maps="Mprocess/process.proto=$module/$out_go/processpb;processpb"
maps="$maps,Mfilesystem/filesystem.proto=$module/$out_go/filesystempb;filesystempb"
rm -rf "${root:?}/$out_go/processpb" "${root:?}/$out_go/filesystempb"
mkdir -p "$root/$out_go"
PATH="$work/bin:$PATH" protoc \
	--proto_path="$root/proto/e2b" \
	--go_out="$root" --go_opt="module=$module,$maps" \
	--connect-go_out="$root" --connect-go_opt="module=$module,$maps" \
	process/process.proto filesystem/filesystem.proto
echo "gen-e2b-proto: wrote proto/e2b and $out_go"
