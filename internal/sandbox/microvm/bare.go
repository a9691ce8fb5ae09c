package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/sandbox"
)

// BareRestore is the floor under a sandbox's start from a boot snapshot,
// for benchmarks: it starts QEMU alone, as the tier would, from the boot
// snapshot of sb's machine shape (sb is a sandbox of r, started with
// boot snapshots on), with blank disks of the same sizes and no cgroup,
// network stack, init or agent behind it, and returns the time from
// starting QEMU to its VM running again. sb may have been destroyed.
func (r *Runtime) BareRestore(ctx context.Context, sb sandbox.Sandbox) (time.Duration, error) {
	s, ok := sb.(*Sandbox)
	if !ok || s.rt != r {
		return 0, fmt.Errorf("bare restore: %T is not a sandbox of this runtime", sb)
	}
	snap := r.boots.lookup(s.machine)
	if snap == nil {
		return 0, errors.New("bare restore: no boot snapshot of the sandbox's shape")
	}
	defer snap.Close()
	dir, err := os.MkdirTemp(r.cfg.sandboxes(), "bare-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	layers, err := s.layerDisks()
	if err != nil {
		return 0, err
	}
	var disks []vmDisk
	for i, d := range s.machine.Disks {
		if i < len(layers) {
			disks = append(disks, layers[i])
			continue
		}
		p := filepath.Join(dir, d.Name)
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			return 0, err
		}
		if err := os.Truncate(p, d.Size); err != nil {
			return 0, err
		}
		disks = append(disks, vmDisk{name: d.Name, path: p, readOnly: d.ReadOnly})
	}
	var ours, theirs []*os.File
	defer func() {
		for _, f := range append(ours, theirs...) {
			f.Close()
		}
	}()
	for range 4 {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return 0, err
		}
		ours = append(ours, os.NewFile(uintptr(fds[0]), "bare"))
		theirs = append(theirs, os.NewFile(uintptr(fds[1]), "bare"))
	}
	v := r.vm(s.machine, disks)
	v.agent, v.ctl, v.qmp, v.incoming = theirs[0], theirs[1], theirs[2], snap
	if s.machine.Net {
		v.net = theirs[3] // frames go nowhere: the guest does not send any yet
	}
	start := time.Now()
	cmd, files, err := v.command(context.Background())
	if err != nil {
		return 0, err
	}
	err = cmd.Start()
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		return 0, err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	q, err := newQMP(ctx, ours[2])
	if err != nil {
		return 0, err
	}
	defer q.close()
	if err := q.waitIncoming(ctx); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// Pid is the process id of the sandbox's VMM (for benchmarks and tests
// that look at the host's side of a guest).
func (s *Sandbox) Pid() int {
	if s.proc == nil || s.proc.Process == nil {
		return 0
	}
	return s.proc.Process.Pid
}
