package microvm

import (
	"github.com/helmr/helmr/internal/sandbox/disk"
)

// settleWorkspaceImage leaves the spec's workspace image fit for the
// host to mount, once QEMU is gone: the guest's kernel had it mounted
// when the VM was killed, which leaves a journaled file system unclean,
// and the host's kernel refuses to mount an unclean one read-only (the
// worker looks into a workspace so). disk.Recover replays the journal in
// user space. A checkpointed sandbox's image is left as it is: the
// checkpoint's disk extents and memory hold the guest's view of it, and
// a restore writes them back over it. So is an image QEMU may still have
// open (a Destroy that gave up waiting for it).
func (s *Sandbox) settleWorkspaceImage() error {
	if s.spec.WorkspaceImage == "" || s.proc == nil || s.checkpointing.Load() {
		return nil
	}
	select {
	case <-s.exited:
	default:
		return nil
	}
	return disk.Recover(s.spec.WorkspaceImage)
}
