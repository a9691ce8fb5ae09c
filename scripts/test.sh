#!/usr/bin/env bash
# Runs every test: Go (unit, store suite on SQLite and PostgreSQL, blob
# store suite on the data directory and S3 (SeaweedFS), sandbox
# conformance, end to end through the real CLI; the packages with
# concurrency again under the race detector), TypeScript (tsc strict
# and node tests), the console in headless Chromium, the Python adapters,
# the published E2B JavaScript SDK,
# and API fuzzing. Installs and starts what the tests need first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

eval "$(scripts/postgres-test.sh)"
export HELMR_TEST_DATABASE_URL
eval "$(scripts/s3-test.sh)" # SeaweedFS: HELMR_TEST_S3_* for the blob-store suite's S3 run
export HELMR_REQUIRE_ALL=1   # tests fail instead of skipping when a prerequisite is missing
eval "$(scripts/e2b-sdk.sh)" # the E2B Python SDK that internal/e2b/envd's tests drive

echo "test: go vet"
go vet ./...
echo "test: go test"
go test -count=1 -timeout 30m -skip '^TestFaultsUnderLoad$' ./...

# The fault test on its own, verbose: it prints what it submitted, what
# completed, and what was lost, duplicated or left behind.
echo "test: faults under load"
go test -count=1 -timeout 20m -run '^TestFaultsUnderLoad$' -v ./internal/e2e

# The control plane's blobs in S3 instead of the data directory: the
# tests that park runs, move workspaces and use remote workers.
echo "test: e2e with the blobs in S3"
HELMR_TEST_BLOBS=s3 go test -count=1 -timeout 30m ./internal/e2e \
  -run 'TestParked|TestRemoteParkedWait|TestEgressCredentialsParked|TestWorkspaceMoves|TestRemoteWorker|TestE2BResumeOnAnotherWorker|TestReplicasShareOperations'

# The packages with concurrency (request handlers, operation queues,
# worker loops, the agent's streams, the stores' locks), once more under
# the race detector (it needs cgo: gcc, which setup.sh installs).
echo "test: go test -race"
go test -count=1 -race -timeout 30m ./internal/httpapi/... ./internal/swerex/... ./internal/workspaces/... \
  ./internal/worker/... ./internal/runs/... ./internal/agent/... ./internal/waitpoints/... ./internal/apikeys/... \
  ./internal/store/... ./internal/sandbox/network/... ./internal/e2b/...

echo "test: TypeScript"
scripts/ts-check.sh

echo "test: console in headless Chromium (console/e2e against helmr dev)"
(cd console/e2e && npm test)

echo "test: Python adapters (against helmr dev and the published mini-swe-agent)"
scripts/python-adapters.sh

echo "test: E2B JavaScript SDK (against helmr dev)"
scripts/e2b-js.sh

echo "test: API fuzzing against proto/openapi.yaml"
scripts/api-fuzz.sh
