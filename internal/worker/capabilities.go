package worker

import (
	"log/slog"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/workers"
)

// withHostDefaults fills what c leaves unset from this machine: arch,
// kernel, vCPUs, memory, the runtime's tier, the worker's slots, and the
// digests of the guest kernel (tiers that have one) and of the built-in
// base root filesystems.
func withHostDefaults(c workers.Capabilities, rt sandbox.Runtime, res *images.Resolver, slots int, log *slog.Logger) workers.Capabilities {
	tier := rt.Name()
	if c.Digests == nil {
		if gk, ok := rt.(sandbox.GuestKernel); ok {
			c.Digests = append(c.Digests, "kernel:"+gk.GuestKernelDigest())
		}
		for _, ref := range res.Bases() {
			d, err := res.BaseDigest(ref)
			if err != nil {
				log.Warn("base image digest", "base", ref, "err", err)
				continue
			}
			c.Digests = append(c.Digests, "rootfs:"+ref+"@"+d)
		}
	}
	if c.Arch == "" {
		c.Arch = runtime.GOARCH
	}
	if len(c.Tiers) == 0 {
		c.Tiers = []string{tier}
	}
	if c.Slots == 0 {
		c.Slots = slots
	}
	if c.CPUs == 0 {
		c.CPUs = float64(runtime.NumCPU())
	}
	var uts unix.Utsname
	if c.Kernel == "" && unix.Uname(&uts) == nil {
		c.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	var si unix.Sysinfo_t
	if c.MemoryBytes == 0 && unix.Sysinfo(&si) == nil {
		c.MemoryBytes = int64(si.Totalram) * int64(si.Unit)
	}
	return c
}
