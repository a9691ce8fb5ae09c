package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/helmr/helmr/internal/agent/guest"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/microvm/guestfmt"
)

// A checkpoint of a microVM (sandbox.Checkpointer) is QEMU's migration
// stream of the stopped VM (its memory: processes, the root's tmpfs
// upper layer, the kernel's caches; and its devices), taken through QMP,
// plus the disks whose blocks that kernel holds in memory and which are
// the sandbox's own: the workspace and /opt/helmr, as data extents. The
// layer disks are not in it: they are the same bytes on every worker
// (guestfmt.LayerImage is reproducible), and their digests are. Restore
// starts QEMU of the same shape with -incoming from the stream, the
// layer disks made here, the checkpoint's own disks written back (the
// workspace over the spec's workspace image, whatever the worker put in
// it: the guest's file system is the checkpoint's, block for block), and
// then has the guest's init take this host's clock and fresh entropy.
// It refuses an image from another QEMU, accelerator, kernel, initramfs
// or TSC rate, or whose layers differ from the spec's.
const (
	checkpointMeta      = "vm.json"
	checkpointState     = "vm.state"
	checkpointWorkspace = "workspace.disk"
	checkpointHelmr     = "helmr.disk"
	checkpointFormat    = "helmr-microvm-checkpoint-1"
)

var _ sandbox.Checkpointer = (*Runtime)(nil)

// meta is what a checkpoint records of the VM it holds.
type meta struct {
	Format  string  `json:"format"`
	Machine machine `json:"machine"`
	// Guest identifies the QEMU, accelerator, kernel, initramfs and TSC
	// rate (see Runtime.guest): a checkpoint restores only where they
	// are the same.
	Guest  string   `json:"guest"`
	Layers []string `json:"layers"` // the layer disks' digests, lowest first
}

// guest is what besides the machine's shape a VM's memory depends on.
func (r *Runtime) guest() string { return r.boots.base }

// Checkpoint implements sandbox.Checkpointer.
func (r *Runtime) Checkpoint(ctx context.Context, sb sandbox.Sandbox, dir string) error {
	s, ok := sb.(*Sandbox)
	if !ok || s.rt != r {
		return fmt.Errorf("checkpoint: %T is not a sandbox of this microvm runtime", sb)
	}
	if r.vmm == VMMFirecracker {
		// Refused before anything is touched: the sandbox goes on.
		return fmt.Errorf("checkpoint sandbox %s: %w: not under Firecracker (its snapshots reset the agent's vsock stream)", s.spec.ID, sandbox.ErrGuestRuntime)
	}
	if err := s.alive(); err != nil || !s.ready {
		return fmt.Errorf("checkpoint sandbox %s: %w: not running", s.spec.ID, sandbox.ErrGuestRuntime)
	}
	if err := s.checkpoint(ctx, dir); err != nil {
		return fmt.Errorf("checkpoint sandbox %s: %w: %w", s.spec.ID, sandbox.ErrGuestRuntime, err)
	}
	derr := s.Destroy(ctx)
	if err := sandbox.WriteImageDigests(dir); err != nil {
		return errors.Join(derr, fmt.Errorf("checkpoint sandbox %s: %w: %w", s.spec.ID, sandbox.ErrGuestRuntime, err))
	}
	return derr
}

// checkpoint saves the VM into dir and leaves it stopped: Destroy ends
// it, and its Execs with sandbox.ErrCheckpointed.
func (s *Sandbox) checkpoint(ctx context.Context, dir string) error {
	m := meta{Format: checkpointFormat, Machine: s.machine, Guest: s.rt.guest()}
	for _, l := range s.spec.RootLayers {
		img, err := guestfmt.LayerImage(s.rt.cfg.layers(), l)
		if err == nil {
			var d string
			if d, err = guestfmt.LayerDigest(img); err == nil {
				m.Layers = append(m.Layers, d)
			}
		}
		if err != nil {
			return err
		}
	}
	f, err := os.OpenFile(filepath.Join(dir, checkpointState), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	s.checkpointing.Store(true)
	s.client.EndAs(sandbox.ErrCheckpointed)
	err = s.qmp.saveTo(ctx, f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// The VM goes on if it can: the checkpoint failed, not the sandbox.
		s.checkpointing.Store(false)
		s.client.EndAs(nil)
		if _, cerr := s.qmp.execute(context.WithoutCancel(ctx), "cont", nil, nil); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return err
	}
	for _, d := range s.ownDisks() {
		if err := writeExtents(filepath.Join(dir, d[0]), d[1]); err != nil {
			return fmt.Errorf("save disk %s: %w", d[0], err)
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, checkpointMeta), b, 0o600)
}

// ownDisks are the sandbox's disks a checkpoint keeps: its checkpoint
// file name and the image's path.
func (s *Sandbox) ownDisks() [][2]string {
	var out [][2]string
	if s.spec.HelmrHost != "" {
		out = append(out, [2]string{checkpointHelmr, filepath.Join(s.dir, "helmr.ext4")})
	}
	ws := s.spec.WorkspaceImage
	if s.ws != nil {
		ws = s.ws.image
	}
	return append(out, [2]string{checkpointWorkspace, ws})
}

// Restore implements sandbox.Checkpointer.
func (r *Runtime) Restore(ctx context.Context, spec sandbox.Spec, dir string) (sandbox.Sandbox, error) {
	if err := r.normalize(&spec); err != nil {
		return nil, fmt.Errorf("restore sandbox %q: %w: %w", spec.ID, sandbox.ErrInvalidSpec, err)
	}
	if _, err := os.Stat(filepath.Join(dir, checkpointState)); err != nil {
		return nil, fmt.Errorf("restore sandbox %s: %w: no checkpoint image: %w", spec.ID, sandbox.ErrGuestRuntime, err)
	}
	if err := sandbox.VerifyImage(dir); err != nil {
		return nil, fmt.Errorf("restore sandbox %s: %w: %w", spec.ID, sandbox.ErrGuestRuntime, err)
	}
	var m meta
	b, err := os.ReadFile(filepath.Join(dir, checkpointMeta))
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err == nil && m.Format != checkpointFormat {
		err = fmt.Errorf("format %q, want %q", m.Format, checkpointFormat)
	}
	if err != nil {
		return nil, fmt.Errorf("restore sandbox %s: %w: checkpoint record: %w", spec.ID, sandbox.ErrGuestRuntime, err)
	}
	if m.Guest != r.guest() {
		return nil, fmt.Errorf("restore sandbox %s: %w: the checkpoint is of another QEMU, accelerator, guest kernel, agent or TSC rate than this worker's", spec.ID, sandbox.ErrGuestRuntime)
	}
	s := newSandbox(r, spec)
	if err := s.restore(ctx, dir, m); err != nil {
		if derr := s.Destroy(context.WithoutCancel(ctx)); derr != nil {
			s.log.Warn("clean up failed restore", "err", derr)
		}
		return nil, fmt.Errorf("restore sandbox %s: %w: %w", spec.ID, sandbox.ErrGuestRuntime, err)
	}
	return s, nil
}

// restore makes the disks as the checkpoint in dir had them and resumes
// its VM.
func (s *Sandbox) restore(ctx context.Context, dir string, m meta) error {
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	disks, err := s.layerDisks()
	if err != nil {
		return err
	}
	var layers []string
	for _, d := range disks {
		digest, err := guestfmt.LayerDigest(d.path)
		if err != nil {
			return err
		}
		layers = append(layers, digest)
	}
	if !slices.Equal(layers, m.Layers) {
		return errors.New("the spec's root layers are not the checkpoint's")
	}
	if s.spec.HelmrHost != "" {
		img := filepath.Join(s.dir, "helmr.ext4")
		if _, err := readExtents(img, filepath.Join(dir, checkpointHelmr)); err != nil {
			return err
		}
		disks = append(disks, vmDisk{name: "helmr", path: img, readOnly: true})
	}
	ws := s.spec.WorkspaceImage
	if ws == "" {
		// The workspace directory gets the guest's tree when the
		// sandbox ends, as a booted one's does.
		ws = filepath.Join(s.dir, "workspace.ext4")
		s.ws = &workspace{host: s.spec.WorkspaceHost, image: ws}
	}
	if _, err := readExtents(ws, filepath.Join(dir, checkpointWorkspace)); err != nil {
		return err
	}
	disks = append(disks, vmDisk{name: guest.VMWorkspaceDisk, path: ws})
	if s.machine, err = s.rt.shape(s.spec, disks); err != nil {
		return err
	}
	if !slices.Equal(s.machine.Disks, m.Machine.Disks) || s.machine.Net != m.Machine.Net {
		return fmt.Errorf("the spec's sandbox (disks %+v, network %v) is not the checkpoint's (disks %+v, network %v)",
			s.machine.Disks, s.machine.Net, m.Machine.Disks, m.Machine.Net)
	}
	s.machine = m.Machine // its memory and vCPUs, whatever the spec asks now
	state, err := os.Open(filepath.Join(dir, checkpointState))
	if err != nil {
		return err
	}
	err = s.launch(disks, state)
	state.Close()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	if err := s.qmp.waitIncoming(ctx); err != nil {
		return fmt.Errorf("%w; console: %s", err, s.console.last())
	}
	f, err := fresh(s.rt.now())
	if err != nil {
		return err
	}
	if err := s.ctl.send(guest.VMCtl{Type: guest.VMCtlResume, Fresh: &f}); err != nil {
		return err
	}
	if err := s.ctl.wait(ctx, guest.VMCtlResumed); err != nil {
		return fmt.Errorf("%w; console: %s", err, s.console.last())
	}
	s.ready = true
	return nil
}
