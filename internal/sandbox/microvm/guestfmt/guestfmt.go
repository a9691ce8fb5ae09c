// Package guestfmt is the microVM tier's guest format, shared by every VMM
// the tier drives (QEMU microvm and Firecracker):
//
//   - the kernel: Debian's cloud kernel as scripts/install-microvm.sh
//     unpacks it into the cache (Kernel): a bzImage, an uncompressed ELF
//     vmlinux (Firecracker boots only that) and the modules the guest's
//     init loads, in load order;
//   - the initramfs (BuildInitramfs): helmr-agent as /init and the modules
//     under /modules. The modules travel in the initramfs rather than on a
//     disk of their own because the disk driver is one of them. The agent
//     runs as the guest's PID 1 (guest.RunVM): it mounts /proc, /sys and
//     /dev, loads the modules with finit_module, mounts the disks and then
//     sets the sandbox up and serves exactly as the process tier's agent
//     does (guest.RunInit, guest.Setup);
//   - disks, each an ext4 image attached as a virtio-blk device whose
//     serial names it (guest.VMDiskPrefix + name; under Firecracker, whose
//     disks carry no such serial, the kernel command line names them in
//     attach order: guest.VMArgDiskNames): one read-only disk per
//     root layer (LayerImage, cached per layer: layers are immutable once
//     made, and images sharing a base share its disk), stacked by the
//     guest's overlayfs with a tmpfs upper layer; /opt/helmr read-only
//     (DirImage); the workspace read-write.
package guestfmt

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/helmr/helmr/internal/agent/guest"
)

// Kernel is a guest kernel unpacked by scripts/install-microvm.sh.
type Kernel struct {
	// Dir is the kernel's directory (<cache>/microvm/<version>).
	Dir string
	// Version is the kernel's release, e.g. 6.1.0-56-cloud-amd64.
	Version string
	// Bzimage is the compressed kernel (QEMU boots it), Vmlinux the
	// uncompressed ELF (Firecracker's).
	Bzimage, Vmlinux string
	// Modules are the module files the init loads, in load order.
	Modules []string
}

// FindKernel returns the kernel scripts/install-microvm.sh left in
// cacheDir (cacheDir/microvm/current).
func FindKernel(cacheDir string) (Kernel, error) {
	link := filepath.Join(cacheDir, "microvm", "current")
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return Kernel{}, fmt.Errorf("no guest kernel at %s (run scripts/install-microvm.sh)", link)
	}
	k := Kernel{
		Dir:     dir,
		Version: filepath.Base(dir),
		Bzimage: filepath.Join(dir, "vmlinuz"),
		Vmlinux: filepath.Join(dir, "vmlinux"),
	}
	for _, p := range []string{k.Bzimage, k.Vmlinux} {
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return Kernel{}, fmt.Errorf("guest kernel %s is incomplete: no %s (run scripts/install-microvm.sh)", dir, filepath.Base(p))
		}
	}
	order, err := os.ReadFile(filepath.Join(dir, "modules", "order"))
	if err != nil {
		return Kernel{}, fmt.Errorf("guest kernel %s: %w (run scripts/install-microvm.sh)", dir, err)
	}
	for _, name := range strings.Fields(string(order)) {
		if name != filepath.Base(name) || !strings.HasSuffix(name, ".ko") {
			return Kernel{}, fmt.Errorf("guest kernel %s: bad module name %q in modules/order", dir, name)
		}
		k.Modules = append(k.Modules, filepath.Join(dir, "modules", name))
	}
	return k, nil
}

// Digest identifies the kernel: the SHA-256 of its bzImage.
func (k Kernel) Digest() (string, error) { return fileDigest(k.Bzimage) }

// BuildInitramfs writes, at dir/initramfs-<digest>.cpio unless it is
// there already, the initramfs of agent (a static helmr-agent) and k's
// modules, and returns its path. The name's digest covers the agent and
// the modules, so a new agent or kernel gets a new file.
func BuildInitramfs(dir, agent string, k Kernel) (string, error) {
	files := []File{{Name: "init", Mode: 0o755, Source: agent}}
	var order strings.Builder
	h := sha256.New()
	for _, f := range append([]string{agent}, k.Modules...) {
		d, err := fileDigest(f)
		if err != nil {
			return "", fmt.Errorf("initramfs: %w", err)
		}
		fmt.Fprintf(h, "%s %s\n", d, filepath.Base(f))
	}
	for _, m := range k.Modules {
		name := filepath.Base(m)
		files = append(files, File{Name: strings.TrimPrefix(guest.VMModulesDir, "/") + "/" + name, Mode: 0o644, Source: m})
		order.WriteString(name + "\n")
	}
	fmt.Fprintf(h, "order %s", order.String())
	out := filepath.Join(dir, "initramfs-"+hex.EncodeToString(h.Sum(nil))[:32]+".cpio")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	orderFile, err := os.CreateTemp(dir, "order-")
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	defer os.Remove(orderFile.Name())
	_, err = orderFile.WriteString(order.String())
	if cerr := orderFile.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	files = append(files, File{Name: strings.TrimPrefix(guest.VMModulesDir, "/") + "/order", Mode: 0o644, Source: orderFile.Name()})
	if err := writeAtomic(out, func(w io.Writer) error { return WriteInitramfs(w, files) }); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	return out, nil
}

// writeAtomic writes path through a temporary file renamed into place.
func writeAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

func fileDigest(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// errNotDir is returned for an image source that is no directory.
var errNotDir = errors.New("not a directory")
