package tiers

import (
	"errors"
	"os"
)

// microVMTier is the hardware-VM tier a later build adds (QEMU microvm /
// Firecracker); doctor lists it so that operators see what it would need.
var microVMTier = Tier{
	Name:      "microvm",
	Strength:  HardwareVM,
	Isolation: "hardware VM",
	Probe: func(Host) (string, error) {
		reason := "not in this build yet (QEMU microvm / Firecracker tier)"
		if _, err := os.Stat("/dev/kvm"); err != nil {
			reason += "; no /dev/kvm"
		}
		return "", errors.New(reason)
	},
}
