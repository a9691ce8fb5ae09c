#!/usr/bin/env bash
# Makes this machine ready to build and run Helmr: Debian packages, the Go
# binaries in bin/ and @helmr/sdk's npm package beside them (helmr init
# vendors it), the TypeScript dev dependencies, the console's browser tests
# (Debian's chromium and console/e2e's npm packages), the built-in base
# image (Debian bookworm + Node.js), gVisor's runsc (built from the Go
# module proxy) and the microVM tier's QEMU and guest kernel
# (scripts/install-microvm.sh). Idempotent; run as root.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "setup: run as root (the process tier and debootstrap need it)" >&2
  exit 1
fi

missing=()
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v node >/dev/null || missing+=(nodejs npm)
command -v go >/dev/null || missing+=(golang-go)
command -v gcc >/dev/null || missing+=(gcc libc6-dev)     # cgo, which go test -race needs (scripts/test.sh)
command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)   # workspace disks (HELMR_WORKSPACE_QUOTA)
command -v ip >/dev/null || missing+=(iproute2)           # network tests' test hosts
command -v chromium >/dev/null || missing+=(chromium)     # the console's browser tests (console/e2e)
command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86) # the microVM tier
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "setup: building bin/helmr and bin/helmr-agent"
mkdir -p bin
go build -trimpath -o bin/helmr ./cmd/helmr
CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/helmr-agent ./cmd/helmr-agent

if [ -f sdk/typescript/package-lock.json ] && [ ! -d sdk/typescript/node_modules ]; then
  echo "setup: installing TypeScript dev dependencies"
  (cd sdk/typescript && npm ci --silent --no-audit --no-fund)
fi
echo "setup: packing @helmr/sdk into bin/ (helmr init vendors it into new projects)"
scripts/sdk-pack.sh bin >/dev/null
# A project helmr init makes installs TypeScript and @types/node (and what
# they need) at the SDK's pins from the registry; installing one here puts
# them, and their registry metadata, in npm's cache, so that it installs
# offline afterwards (the end-to-end tests do: npm install --offline).
# npm ci above fetches tarballs by their locked address only, which a
# fresh cache then lacks the metadata for.
echo "setup: caching what helmr init's projects install (npm cache)"
init_tmp=$(mktemp -d)
bin/helmr init "$init_tmp/project" >/dev/null
(cd "$init_tmp/project" && npm install --prefer-offline --silent --no-audit --no-fund)
rm -rf "$init_tmp"
if [ ! -f console/e2e/node_modules/.package-lock.json ] || [ console/e2e/package-lock.json -nt console/e2e/node_modules/.package-lock.json ]; then
  echo "setup: installing the browser tests' dependencies (console/e2e)"
  (cd console/e2e && npm ci --silent --no-audit --no-fund)
fi

scripts/build-base-rootfs.sh bookworm-node22
scripts/install-runsc.sh >/dev/null
scripts/install-microvm.sh >/dev/null
