package microvm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/helmr/helmr/internal/sandbox/microvm/firecracker"
)

// Firecracker snapshots: the pieces a sandbox.Checkpointer on Runtime
// would be made of, not one yet. What is missing is the agent's stream:
// Firecracker resets the guest's vsock connections when it takes a
// snapshot, so the sandbox's agent loses its stream, ends, and the
// restored guest powers off. A Checkpointer needs the guest's init to
// keep the sandbox's agent across a new connection.
const (
	snapState = firecracker.SnapshotDir + "/vmstate"
	snapMem   = firecracker.SnapshotDir + "/mem"
)

// firecrackerSnapshot pauses the guest and takes a full snapshot of it
// into its jail's SnapshotDir; it returns the state and memory files'
// host paths. The guest stays paused.
func (s *Sandbox) firecrackerSnapshot(ctx context.Context) (state, mem string, err error) {
	if s.fc == nil || s.fc.api == nil {
		return "", "", errors.New("snapshot: the sandbox runs under no Firecracker")
	}
	if err := s.fc.api.Snapshot(ctx, snapState, snapMem); err != nil {
		return "", "", fmt.Errorf("snapshot: %w", err)
	}
	return s.fc.jail.HostPath(snapState), s.fc.jail.HostPath(snapMem), nil
}

// restoreFirecracker loads a snapshot of from (firecrackerSnapshot) into
// a new jailed Firecracker and resumes it, as sandbox id: the new jail
// has from's disks at the same paths (Firecracker reopens them there) and
// the snapshot's files. from's Firecracker must have exited: its
// workspace disk is writable. The restored sandbox has no agent (see
// above): it answers no Exec.
func (r *Runtime) restoreFirecracker(ctx context.Context, from *Sandbox, id, state, mem string) (*Sandbox, error) {
	if from.fc == nil {
		return nil, fmt.Errorf("restore sandbox %s: %s ran under no Firecracker", id, from.spec.ID)
	}
	spec := from.spec
	spec.ID = id
	s := newSandbox(r, spec)
	err := s.restoreFC(ctx, from, state, mem)
	if err != nil {
		if derr := s.Destroy(context.Background()); derr != nil {
			s.log.Warn("clean up failed restore", "err", derr)
		}
		return nil, fmt.Errorf("restore sandbox %s: %w", id, err)
	}
	return s, nil
}

func (s *Sandbox) restoreFC(ctx context.Context, from *Sandbox, state, mem string) error {
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	s.machine = from.machine
	j := s.newJail(jailID(s.rt.cfg.StateDir, s.spec.ID))
	s.fc = &fcVM{jail: j, disks: from.fc.disks, cgroot: s.rt.cfg.CgroupRoot}
	if err := j.Prepare(); err != nil {
		return err
	}
	for _, d := range from.fc.disks {
		if err := s.fc.grant(d.path, d.readOnly, j.UID, j.GID); err != nil {
			return err
		}
		if err := j.Place(d.path, "/disks/"+d.name+".ext4", d.readOnly); err != nil {
			return err
		}
	}
	for src, p := range map[string]string{state: snapState, mem: snapMem} {
		if err := j.Place(src, p, true); err != nil {
			return err
		}
	}
	if err := s.fc.netNamespace(s, s.spec.Network.Attaches()); err != nil {
		return err
	}
	if err := s.runJailer(); err != nil {
		return err
	}
	ctx, cancel := s.untilExit(ctx)
	defer cancel()
	api, err := j.WaitAPI(ctx)
	if err != nil {
		return fmt.Errorf("firecracker: %w; console: %s", err, s.console.last())
	}
	s.fc.api = api
	if err := api.Restore(ctx, snapState, snapMem); err != nil {
		return fmt.Errorf("load snapshot: %w; console: %s", err, s.console.last())
	}
	s.log.Info("restored from a snapshot", "from", filepath.Base(from.dir))
	return nil
}
