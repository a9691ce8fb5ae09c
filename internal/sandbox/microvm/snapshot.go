package microvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/microvm/guestfmt"
)

// machine is a VM's shape: what QEMU's devices and the guest's kernel
// know of its hardware. A snapshot restores only into a VM of the same
// shape (QEMU matches devices by their order and ids, and the guest's
// kernel has the disks' sizes), so it is part of a boot snapshot's key
// and of a checkpoint.
type machine struct {
	MemMiB int64       `json:"mem_mib"`
	CPUs   int         `json:"cpus"`
	Net    bool        `json:"net"`
	Disks  []diskShape `json:"disks"`
}

// diskShape is one disk of a machine, in the order QEMU attaches them.
// A root layer's has its digest too: the guest's init mounts the layers
// before its idle moment, so a boot snapshot holds what it read of them.
type diskShape struct {
	Name     string `json:"name"`
	Size     int64  `json:"size"`
	ReadOnly bool   `json:"read_only,omitempty"`
	Digest   string `json:"digest,omitempty"`
}

// shape is the machine spec's sandbox runs on with disks.
func (r *Runtime) shape(spec sandbox.Spec, disks []vmDisk) (machine, error) {
	mem := sandboxMemory(spec)
	cpus := 1
	if spec.CPU > 1 {
		cpus = int(spec.CPU + 0.999)
	}
	m := machine{MemMiB: (mem + guestMemOverhead) >> 20, CPUs: cpus, Net: spec.Network.Attaches()}
	for _, d := range disks {
		fi, err := os.Stat(d.path)
		if err != nil {
			return machine{}, fmt.Errorf("disk %s: %w", d.name, err)
		}
		ds := diskShape{Name: d.name, Size: fi.Size(), ReadOnly: d.readOnly}
		if d.layer {
			if ds.Digest, err = guestfmt.LayerDigest(d.path); err != nil {
				return machine{}, err
			}
		}
		m.Disks = append(m.Disks, ds)
	}
	return m, nil
}

// vm is the QEMU invocation of machine m with disks (ports, monitor and
// network to be filled in).
func (r *Runtime) vm(m machine, disks []vmDisk) *vm {
	return &vm{
		qemu: r.cfg.QEMUPath, accel: r.accel, kernel: r.cfg.Kernel.Bzimage, initramfs: r.initramfs,
		memMiB: m.MemMiB, cpus: m.CPUs, disks: disks, uid: r.cfg.UID, gid: r.cfg.GID,
	}
}

// bootSnapshots keeps, per machine shape, one snapshot of a guest booted
// to its idle moment (guest.VMCtlIdle: drivers loaded, disks probed, the
// root layers mounted, the sandbox's agent started and waiting, nothing
// of any one sandbox in it): a sandbox of that shape (its image's layers
// among it)
// starts by restoring it rather than by booting. Everything that makes
// the sandbox its own (its disks' contents, limits, network, clock and
// entropy) comes after, in the start message. A snapshot is taken of the
// first sandbox that boots with a shape, at that moment, which then goes
// on; it is kept in dir/<key>.state until the worker's state is removed.
// The key covers the shape and everything else the guest's memory
// depends on: the VMM's binary, the accelerator, the kernel, the
// initramfs (the agent) and the TSC rate the kernel was told.
type bootSnapshots struct {
	dir  string
	base string // the key's part that is this runtime's (see above)
	log  *slog.Logger
	off  bool

	mu     sync.Mutex
	saving map[string]bool
}

// bootSnapshotFormat changes when what a boot snapshot holds changes.
const bootSnapshotFormat = "helmr-boot-1"

// maxBootSnapshots bounds the boot snapshots a worker keeps (each is the
// guest's memory in use, about 100 MiB for the base image): past it, the
// least recently used go.
const maxBootSnapshots = 8

func newBootSnapshots(dir string, r *Runtime, off bool) (*bootSnapshots, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("boot snapshots: %w", err)
	}
	// What a previous worker left half written.
	if tmps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(tmps) > 0 {
		for _, p := range tmps {
			_ = os.Remove(p)
		}
	}
	vmm := r.cfg.QEMUPath
	if r.vmm == VMMFirecracker {
		vmm = r.cfg.Firecracker.Firecracker
	}
	vmmDigest, err := fileDigestOf(vmm)
	if err != nil {
		return nil, fmt.Errorf("boot snapshots: %w", err)
	}
	kernel, err := r.cfg.Kernel.Digest()
	if err != nil {
		return nil, fmt.Errorf("boot snapshots: %w", err)
	}
	base := strings.Join([]string{bootSnapshotFormat, r.vmm, vmmDigest, r.accel, kernel, filepath.Base(r.initramfs),
		fmt.Sprint(tscKHz())}, "\x00")
	return &bootSnapshots{dir: dir, base: base, log: r.log, off: off, saving: map[string]bool{}}, nil
}

func (b *bootSnapshots) key(m machine) string {
	data, _ := json.Marshal(m)
	h := sha256.Sum256([]byte(b.base + "\x00" + string(data)))
	return hex.EncodeToString(h[:16])
}

// lookup opens m's snapshot, or returns nil if there is none yet.
func (b *bootSnapshots) lookup(m machine) *os.File {
	if b.off {
		return nil
	}
	p := filepath.Join(b.dir, b.key(m)+".state")
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now) // used: kept longest (prune)
	return f
}

// save snapshots the VM q runs, idle and of shape m, unless m has a
// snapshot or one is being saved, then lets the VM go on. A snapshot that
// fails is logged and skipped: the sandbox does not need it. Only a VM
// that cannot go on afterwards is an error.
func (b *bootSnapshots) save(ctx context.Context, m machine, q *qmp) error {
	if b.off {
		return nil
	}
	key := b.key(m)
	final := filepath.Join(b.dir, key+".state")
	b.mu.Lock()
	_, err := os.Stat(final)
	if err == nil || b.saving[key] {
		b.mu.Unlock()
		return nil
	}
	b.saving[key] = true
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.saving, key)
		b.mu.Unlock()
	}()
	start := time.Now()
	if err := b.write(ctx, final, q); err != nil {
		b.log.Warn("boot snapshot not saved", "key", key, "err", err)
	} else {
		b.log.Info("boot snapshot saved", "key", key, "mem_mib", m.MemMiB, "took", time.Since(start))
		b.prune()
	}
	if _, err := q.execute(ctx, "cont", nil, nil); err != nil {
		return fmt.Errorf("%w: resume the vm after its boot snapshot: %w", sandbox.ErrGuestRuntime, err)
	}
	return nil
}

// prune removes the least recently used snapshots past maxBootSnapshots.
// A sandbox restoring one has it open: removing its name harms nothing.
func (b *bootSnapshots) prune() {
	paths, _ := filepath.Glob(filepath.Join(b.dir, "*.state"))
	if len(paths) <= maxBootSnapshots {
		return
	}
	used := map[string]time.Time{}
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			used[p] = fi.ModTime()
		}
	}
	sort.Slice(paths, func(i, j int) bool { return used[paths[i]].After(used[paths[j]]) })
	for _, p := range paths[maxBootSnapshots:] {
		if err := os.Remove(p); err != nil {
			b.log.Warn("remove boot snapshot", "path", p, "err", err)
		}
	}
}

func (b *bootSnapshots) write(ctx context.Context, final string, q *qmp) error {
	f, err := os.CreateTemp(b.dir, ".snapshot-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = q.saveTo(ctx, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// fileDigestOf is the hex SHA-256 of the file at p.
func fileDigestOf(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:]), nil
}
