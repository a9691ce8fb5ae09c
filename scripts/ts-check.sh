#!/usr/bin/env bash
# ts-check.sh type-checks and tests Helmr's TypeScript: @helmr/sdk
# (sdk/typescript), the guest adapter and index runner (runtime/typescript)
# and the example projects, and checks that the client's generated types
# (sdk/typescript/src/client/gen/openapi.ts) are what proto/openapi.yaml
# generates. The only dependencies are the dev tools pinned in
# sdk/typescript/package-lock.json (typescript, @types/node,
# openapi-typescript, ajv); the runtime and the examples use them from there.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sdk="$root/sdk/typescript"
tsc=(node "$sdk/node_modules/typescript/bin/tsc")

if [[ ! -f "$sdk/node_modules/.package-lock.json" || "$sdk/package-lock.json" -nt "$sdk/node_modules/.package-lock.json" ]]; then
	echo "ts-check: npm ci in sdk/typescript"
	(cd "$sdk" && npm ci --no-audit --no-fund --loglevel=error)
fi

echo "ts-check: sdk/typescript/src/client/gen/openapi.ts is generated from proto/openapi.yaml"
if ! (cd "$sdk" && npm run --silent generate -- --check); then
	echo "ts-check: gen/openapi.ts is stale: run 'npm run generate' in sdk/typescript and commit it" >&2
	exit 1
fi

for project in sdk/typescript runtime/typescript examples/hello examples/repo-agent examples/review-pr examples/repo-review; do
	echo "ts-check: tsc --noEmit -p $project"
	"${tsc[@]}" --noEmit -p "$root/$project/tsconfig.json"
done

echo "ts-check: node --test sdk/typescript"
(cd "$sdk" && rm -rf .build && "${tsc[@]}" -p tsconfig.test.json && node --test .build/test/*.test.js)

echo "ts-check: node --test runtime/typescript"
(cd "$root/runtime/typescript" && rm -rf .build && "${tsc[@]}" -p tsconfig.test.json && node --test .build/runtime/typescript/test/*.test.js)
