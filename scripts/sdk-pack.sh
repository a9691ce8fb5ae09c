#!/usr/bin/env bash
# sdk-pack.sh builds @helmr/sdk (tsc into sdk/typescript/dist: ES modules,
# .d.ts and their maps) and packs it with npm pack into OUTDIR (default
# bin/, next to helmr, where `helmr init` looks for it). It prints the
# tarball's path. Nothing is fetched but the SDK's pinned dev tools, once
# (npm ci, as scripts/ts-check.sh does).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sdk="$root/sdk/typescript"
out="${1:-$root/bin}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

if [[ ! -f "$sdk/node_modules/.package-lock.json" || "$sdk/package-lock.json" -nt "$sdk/node_modules/.package-lock.json" ]]; then
	echo "sdk-pack: npm ci in sdk/typescript" >&2
	(cd "$sdk" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi

# npm pack runs the package's prepack script (npm run build) first.
name="$(cd "$sdk" && npm pack --silent --loglevel=error --pack-destination "$out" | tail -n 1)"
echo "$out/$name"
