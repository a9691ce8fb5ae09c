#!/usr/bin/env bash
# s3-test.sh starts a throwaway S3-compatible server (SeaweedFS, built by
# scripts/install-seaweedfs.sh) for the blob-store tests and the e2e runs
# against S3, and prints how to reach it:
#
#   eval "$(scripts/s3-test.sh)"   # exports HELMR_TEST_S3_URL, _ENDPOINT, _ACCESS_KEY, _SECRET_KEY
#   scripts/s3-test.sh --stop      # stops the server and removes its data
#
# `weed server -s3` (master, volume, filer and S3 gateway in one process)
# listens on 127.0.0.1 only, on free ports, with its data in HELMR_S3_DIR
# (default /var/tmp/helmr-s3test) and one identity whose keys are printed.
# Volumes are small (256 MiB) and their number fixed (64): with SeaweedFS's
# default (30 GiB volumes, as many as the free disk holds) a machine with
# under 90 GiB free had no slot left for the bucket's volumes, and every
# put failed with an internal error. No telemetry leaves the machine.
# It is idempotent: a second run reuses a running server and its bucket.
# Progress goes to stderr; stdout carries only the exports. Test data only.
set -euo pipefail

dir=${HELMR_S3_DIR:-/var/tmp/helmr-s3test}
bucket=helmr-test
access_key=helmrtest
secret_key=helmr-test-secret-key
mode=export

case "${1:-}" in
  --stop) mode=stop ;;
  "") ;;
  *) echo "usage: $0 [--stop]" >&2; exit 2 ;;
esac

log() { echo "s3-test: $*" >&2; }

running() { [[ -f $dir/weed.pid ]] && kill -0 "$(cat "$dir/weed.pid")" 2>/dev/null; }

if [[ $mode == stop ]]; then
  if running; then
    pid=$(cat "$dir/weed.pid")
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
  exit 0
fi

here=$(cd "$(dirname "$0")" && pwd)
weed=$("$here/install-seaweedfs.sh")

# free_port prints a port on 127.0.0.1 that nothing listens on, nor on
# port+10000 (SeaweedFS's default gRPC offset, kept clear too).
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((20000 + RANDOM % 30000))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null &&
       ! (exec 3<>/dev/tcp/127.0.0.1/$((p + 10000))) 2>/dev/null &&
       [[ " ${used:-} " != *" $p "* ]]; then
      used="${used:-} $p"
      echo "$p"
      return
    fi
  done
  echo "s3-test: no free port" >&2
  exit 1
}

if ! running; then
  rm -rf "$dir"
  mkdir -p "$dir/data"
  chmod 700 "$dir"
  used=""
  master=$(free_port); used="$used $master"
  volume=$(free_port); used="$used $volume"
  filer=$(free_port); used="$used $filer"
  s3=$(free_port)
  cat >"$dir/s3.json" <<JSON
{"identities": [{"name": "helmr", "credentials": [{"accessKey": "$access_key", "secretKey": "$secret_key"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
  log "starting weed server -s3 on 127.0.0.1:$s3 (data in $dir)"
  setsid "$weed" server -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.port="$master" -master.port.grpc=$((master + 10000)) \
    -volume.port="$volume" -volume.port.grpc=$((volume + 10000)) \
    -volume.max=64 -master.volumeSizeLimitMB=256 -master.telemetry=false \
    -filer.port="$filer" -filer.port.grpc=$((filer + 10000)) \
    -s3 -s3.port="$s3" -s3.config="$dir/s3.json" \
    </dev/null >"$dir/weed.log" 2>&1 &
  echo $! >"$dir/weed.pid"
  echo "$s3" >"$dir/s3.port"
fi

s3=$(cat "$dir/s3.port")
endpoint=http://127.0.0.1:$s3
sig=(--aws-sigv4 "aws:amz:us-east-1:s3" --user "$access_key:$secret_key")

# Ready once the gateway answers a signed request; then make the bucket
# (409 when it exists).
deadline=$((SECONDS + 90))
until code=$(curl -s -o /dev/null -w '%{http_code}' "${sig[@]}" "$endpoint/") && [[ $code == 200 ]]; do
  if ! running; then
    tail -n 30 "$dir/weed.log" >&2
    log "weed exited"
    exit 1
  fi
  if ((SECONDS > deadline)); then
    tail -n 30 "$dir/weed.log" >&2
    log "S3 gateway not ready after 90s (last status ${code:-none}); see $dir/weed.log"
    exit 1
  fi
  sleep 0.3
done
until code=$(curl -s -o "$dir/mb.out" -w '%{http_code}' "${sig[@]}" -X PUT "$endpoint/$bucket") &&
  [[ $code == 200 || $code == 409 ]]; do
  if ((SECONDS > deadline)); then
    cat "$dir/mb.out" >&2
    log "cannot create bucket $bucket (status $code)"
    exit 1
  fi
  sleep 0.3
done
log "bucket $bucket ready at $endpoint"

echo "export HELMR_TEST_S3_URL='s3://$bucket'"
echo "export HELMR_TEST_S3_ENDPOINT='$endpoint'"
echo "export HELMR_TEST_S3_ACCESS_KEY='$access_key'"
echo "export HELMR_TEST_S3_SECRET_KEY='$secret_key'"
