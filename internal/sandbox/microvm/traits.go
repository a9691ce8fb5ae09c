package microvm

import "github.com/helmr/helmr/internal/sandbox"

var _ sandbox.TraitsReporter = (*Runtime)(nil)

// Traits implements sandbox.TraitsReporter: a guest sees its spec's host
// directories as disks made at Start (the worker hands the workspace over
// as an image and places late files through the agent, which may write
// under /opt/helmr: agent.Init.HelmrWritable), and under TCG it is no
// security boundary.
func (r *Runtime) Traits() sandbox.Traits {
	t := sandbox.Traits{DiskGuest: true}
	if r.accel != AccelKVM {
		t.NoBoundary = "QEMU emulates the guest (TCG, no KVM here): emulation, NOT a security boundary"
	}
	return t
}
