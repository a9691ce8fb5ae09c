package worker

import (
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/workers"
)

// withHostDefaults fills what c leaves unset from this machine: arch,
// kernel, vCPUs, memory, the runtime's tier and the worker's slots.
func withHostDefaults(c workers.Capabilities, tier string, slots int) workers.Capabilities {
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
