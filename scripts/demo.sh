#!/usr/bin/env bash
# Sets the machine up, then runs examples/hello end to end on the embedded
# default (helmr dev with SQLite, the strongest isolation tier that works
# here, `helmr doctor` says which): deploy, run, follow its logs, print its
# final status and what its workspace holds.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

tmp=$(mktemp -d)
export HELMR_DATA_DIR="$tmp/data" HELMR_PROFILE="$tmp/profile.json" HELMR_ADDR=127.0.0.1:0
bin/helmr dev >"$tmp/dev.out" 2>"$tmp/dev.log" &
dev=$!
trap 'kill $dev 2>/dev/null; wait $dev 2>/dev/null; rm -rf "$tmp"' EXIT

for _ in $(seq 1 100); do
  url=$(sed -n 's/^Helmr dev at \([^ ]*\).*/\1/p' "$tmp/dev.out")
  [ -n "$url" ] && break
  kill -0 $dev 2>/dev/null || { cat "$tmp/dev.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "${url:-}" ] || { echo "demo: helmr dev did not start" >&2; cat "$tmp/dev.log" >&2; exit 1; }
echo "demo: helmr dev is at $url"
export HELMR_URL=$url

bin/helmr deploy examples/hello
bin/helmr run hello --payload-json '{"name":"Helmr"}' --wait
echo "demo: the run's workspace holds:"
# Each run's workspace is a disk image of its own (HELMR_WORKSPACE_QUOTA);
# with the quota off it is a plain directory.
for ws in "$HELMR_DATA_DIR"/workspaces/*; do
  if [ "${ws%.img}" != "$ws" ]; then
    mkdir -p "$tmp/ws"
    mount -o loop,ro "$ws" "$tmp/ws"
    ls "$tmp/ws"
    umount "$tmp/ws"
  elif [ -d "$ws" ]; then # (workspaces/ID.seq records which snapshot a copy is)
    ls "$ws"
  fi
done
