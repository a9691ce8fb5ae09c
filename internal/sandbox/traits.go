package sandbox

// Traits are how a tier's sandboxes differ from the reference tiers'
// (process, gVisor) in ways the worker must act on. The zero value is the
// reference: the spec's host directories are mounted into the sandbox
// and both sides see each other's changes at once, and the sandbox is as
// strong a boundary as its tier's kind.
type Traits struct {
	// DiskGuest: the sandbox runs on a kernel of its own and sees its
	// spec's host directories only as disks made from them at Start (a
	// VM). Files the host writes into HelmrHost later never reach the
	// guest: they go in through Sandbox.WriteFile, which in such a tier
	// may also place files under /opt/helmr (read-only to the sandbox's
	// processes all the same). The workspace is best handed over as an
	// unmounted image (Spec.WorkspaceImage), which the guest writes in
	// place and the host must neither mount, write nor move until Destroy
	// returns (the tier may open it by its path again: a checkpoint); a
	// WorkspaceHost directory is copied in at Start and back at Destroy,
	// and is stale in between.
	DiskGuest bool
	// NoBoundary, if set, says why this tier's sandboxes are no security
	// boundary on this host although its kind would be one (a microVM
	// that QEMU emulates with TCG instead of running it under KVM): the
	// runs' events say so.
	NoBoundary string
}

// TraitsReporter is implemented by runtimes whose Traits are not the zero
// value, and by wrappers of runtimes (which forward TraitsOf).
type TraitsReporter interface {
	Traits() Traits
}

// TraitsOf returns rt's traits: what it reports, else the zero value.
func TraitsOf(rt Runtime) Traits {
	if r, ok := rt.(TraitsReporter); ok {
		return r.Traits()
	}
	return Traits{}
}
