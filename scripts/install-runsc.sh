#!/usr/bin/env bash
# Builds gVisor's runsc as a static binary (CGO_ENABLED=0) at a pinned version
# from the Go module proxy into ${HELMR_CACHE_DIR:-$HOME/.cache/helmr}/bin/runsc,
# checks that it runs here (systrap platform, no network), and prints its path.
# Idempotent: a cached binary that reports the pinned version is kept.
# The build runs outside this repository's module so go.mod is never touched.
set -euo pipefail

command -v go >/dev/null || { echo "install-runsc: go is required (see scripts/setup.sh)" >&2; exit 1; }

RUNSC_MODULE=gvisor.dev/gvisor/runsc
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237

cache_dir=${HELMR_CACHE_DIR:-$HOME/.cache/helmr}
bin_dir=$cache_dir/bin
runsc=$bin_dir/runsc

log() { echo "install-runsc: $*" >&2; }

# pinned: the cached binary runs and its Go build info names the pinned
# module version (a proxy build's `runsc --version` says VERSION_MISSING).
pinned() {
  [ -x "$runsc" ] && "$runsc" --version >/dev/null 2>&1 &&
    go version -m "$runsc" 2>/dev/null | grep -Eq "^[[:space:]]+mod[[:space:]]+gvisor.dev/gvisor[[:space:]]+$RUNSC_VERSION[[:space:]]"
}

if pinned; then
  log "runsc $RUNSC_VERSION already built"
else
  log "building $RUNSC_MODULE@$RUNSC_VERSION (static, takes a few minutes)"
  mkdir -p "$bin_dir"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # GOFLAGS=-mod=mod: runsc's module has no vendor directory for a plain install.
  (cd "$work" && CGO_ENABLED=0 GOFLAGS=-mod=mod GOBIN="$work/bin" \
    go install -trimpath -ldflags='-s -w' "$RUNSC_MODULE@$RUNSC_VERSION")
  install -m 0755 "$work/bin/runsc" "$runsc.new"
  mv -f "$runsc.new" "$runsc"
  pinned || { log "built $runsc but it does not report $RUNSC_VERSION"; exit 1; }
fi

"$runsc" --version >&2

# Smoke check: a sandbox that runs `true` under systrap with no network.
# `runsc do` needs root here (it sets up the sandbox's cgroup and mounts).
if [ "$(id -u)" = 0 ]; then
  smoke=$(mktemp -d)
  if ! "$runsc" --root="$smoke/state" --platform=systrap --network=none \
      --rootless=false --ignore-cgroups do true >"$smoke/log" 2>&1; then
    cat "$smoke/log" >&2
    rm -rf "$smoke"
    log "runsc $RUNSC_VERSION is built but cannot run a sandbox on this host"
    exit 1
  fi
  rm -rf "$smoke"
  log "runsc runs a sandbox (platform systrap)"
else
  log "not root: skipped the sandbox smoke check"
fi

echo "$runsc"
