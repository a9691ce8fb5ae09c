#!/usr/bin/env bash
# Installs what the microVM tier needs and prints the guest kernel's directory:
#   - QEMU (apt package qemu-system-x86) when qemu-system-x86_64 is missing;
#   - Debian's cloud kernel (linux-image-cloud-amd64 resolves to a versioned
#     package; that one is downloaded and unpacked with dpkg -x, never
#     installed on the host) into ${HELMR_CACHE_DIR:-$HOME/.cache/helmr}/microvm/<kver>/:
#       vmlinuz   the compressed bzImage (QEMU microvm boots it)
#       vmlinux   the uncompressed ELF kernel (Firecracker needs one)
#       config    the kernel's build config
#       modules/  the modules the guest's init loads, uncompressed .ko
#       modules/order  their names, dependencies first (the init loads them
#                 in this order with finit_module)
#   - ${cache}/microvm/current, a symlink to that directory.
# Idempotent: a complete kernel directory is kept. Needs root for apt-get.
set -euo pipefail

cache_dir=${HELMR_CACHE_DIR:-$HOME/.cache/helmr}
base=$cache_dir/microvm
# The modules the guest needs (virtio-mmio transport, block, console,
# network, entropy, overlayfs, and virtio vsock: a Firecracker guest's
# agent stream); their dependencies are added below. ext4 (with jbd2,
# mbcache, crc16) is built into the cloud kernel. A module whose device
# the VMM does not offer (vsock under QEMU, virtio-serial under
# Firecracker) loads and stays idle.
want_modules=(virtio_mmio virtio_blk virtio_console virtio_net virtio-rng overlay vmw_vsock_virtio_transport)

log() { echo "install-microvm: $*" >&2; }

if ! command -v qemu-system-x86_64 >/dev/null; then
  log "installing qemu-system-x86 (apt)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends qemu-system-x86 >&2
fi
command -v mkfs.ext4 >/dev/null || {
  log "installing e2fsprogs (apt)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends e2fsprogs >&2
}

# The versioned package the meta package depends on, e.g.
# linux-image-6.1.0-56-cloud-amd64.
cloud_kernel() {
  apt-cache depends linux-image-cloud-amd64 2>/dev/null |
    sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | head -n1
}
pkg=$(cloud_kernel)
if [ -z "$pkg" ]; then
  log "apt-get update (no package lists name the cloud kernel)"
  apt-get update -qq >&2
  pkg=$(cloud_kernel)
fi
[ -n "$pkg" ] || { log "apt knows no linux-image-cloud-amd64 (run apt-get update?)"; exit 1; }
kver=${pkg#linux-image-}
dir=$base/$kver

# complete: the kernel directory has both kernels and every wanted module
# (a directory unpacked before a module was added to want_modules is
# unpacked again).
complete() {
  [ -s "$dir/vmlinuz" ] && [ -s "$dir/vmlinux" ] && [ -s "$dir/modules/order" ] || return 1
  local m
  for m in "${want_modules[@]}"; do
    grep -qxF -e "$m.ko" -e "${m//_/-}.ko" -e "${m//-/_}.ko" "$dir/modules/order" || return 1
  done
}

# extract_vmlinux BZIMAGE OUT: finds the compressed payload in a bzImage
# (the technique of the kernel's scripts/extract-vmlinux) and keeps the
# first candidate that decompresses to an ELF file.
extract_vmlinux() {
  local img=$1 out=$2 spec magic cmd pos
  for spec in '\x1f\x8b\x08|gzip -dc' '\xfd7zXZ\x00|xz -dc' '\x28\xb5\x2f\xfd|zstd -dc' '\x02\x21\x4c\x18|lz4 -dc'; do
    magic=${spec%%|*} cmd=${spec#*|}
    for pos in $(LC_ALL=C grep -obUaP "$magic" "$img" | cut -d: -f1 || true); do
      # Decompressors complain about the bytes after the payload: only
      # the ELF header of what they wrote counts.
      tail -c+$((pos + 1)) "$img" | $cmd >"$out.tmp" 2>/dev/null || true
      if [ -s "$out.tmp" ] && [ "$(head -c4 "$out.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
        mv -f "$out.tmp" "$out"
        return 0
      fi
    done
  done
  rm -f "$out.tmp"
  return 1
}

if complete; then
  log "kernel $kver already unpacked"
else
  log "fetching $pkg"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  chmod 0755 "$work" # apt's _apt user downloads into it
  (cd "$work" && apt-get download "$pkg" >&2)
  dpkg -x "$work"/"$pkg"_*.deb "$work/x"
  rm -rf "$dir.new"
  mkdir -p "$dir.new/modules"
  cp "$work/x/boot/vmlinuz-$kver" "$dir.new/vmlinuz"
  cp "$work/x/boot/config-$kver" "$dir.new/config"
  extract_vmlinux "$dir.new/vmlinuz" "$dir.new/vmlinux" ||
    { log "could not extract an ELF vmlinux from vmlinuz-$kver"; exit 1; }

  # Resolve dependencies from each module's .modinfo "depends=" field
  # (the package ships no modules.dep: depmod runs at install time).
  declare -A path=() done=()
  while IFS= read -r f; do
    n=$(basename "$f" .ko)
    path[$n]=$f
    path[${n//-/_}]=$f
  done < <(find "$work/x/lib/modules/$kver" -name '*.ko')
  order=()
  add() {
    local n=$1 f d
    [ -z "${done[$n]:-}" ] || return 0
    f=${path[$n]:-}
    [ -n "$f" ] || { log "module $n is not in $pkg"; exit 1; }
    done[$n]=1
    for d in $(LC_ALL=C tr '\0' '\n' <"$f" | sed -n 's/^depends=//p' | tr ',' ' '); do
      add "$d"
    done
    cp "$f" "$dir.new/modules/"
    order+=("$(basename "$f")")
  }
  for m in "${want_modules[@]}"; do add "$m"; done
  printf '%s\n' "${order[@]}" >"$dir.new/modules/order"
  rm -rf "$dir"
  mv "$dir.new" "$dir"
  complete || { log "unpacked $pkg but $dir is incomplete"; exit 1; }
fi

ln -sfn "$kver" "$base/current"
log "qemu: $(qemu-system-x86_64 --version | head -n1)"
log "modules: $(tr '\n' ' ' <"$dir/modules/order")"
echo "$dir"
