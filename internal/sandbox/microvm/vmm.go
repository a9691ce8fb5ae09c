package microvm

import (
	"fmt"

	"github.com/helmr/helmr/internal/sandbox/microvm/firecracker"
)

// VMMs the tier drives, and the setting that picks one
// (HELMR_MICROVM_VMM).
const (
	VMMQEMU        = "qemu"
	VMMFirecracker = "firecracker"
	VMMAuto        = "auto"
)

// CheckVMM reports whether setting is a VMM setting: qemu, firecracker,
// auto or empty (auto).
func CheckVMM(setting string) error {
	switch setting {
	case "", VMMAuto, VMMQEMU, VMMFirecracker:
		return nil
	}
	return fmt.Errorf("microvm VMM %q: want qemu, firecracker or auto", setting)
}

// FirecrackerReady says whether Firecracker can run guests here: its
// binaries installed (in) and /dev/kvm booting a stock kernel (accel,
// with why: ChooseAccel's answer). Firecracker has no emulator: without
// KVM it runs nothing. The reason names everything that is missing.
func FirecrackerReady(in firecracker.Install, accel, why string) (bool, string) {
	var missing []string
	if err := in.Usable(); err != nil {
		missing = append(missing, err.Error())
	}
	if accel != AccelKVM {
		if why == "" {
			why = "KVM not probed"
		}
		missing = append(missing, why)
	}
	if len(missing) == 0 {
		return true, "firecracker " + in.Version.String() + " and its jailer installed; /dev/kvm boots a stock kernel"
	}
	r := missing[0]
	for _, m := range missing[1:] {
		r += "; " + m
	}
	return false, r
}

// ChooseVMM applies setting: qemu is QEMU; firecracker is Firecracker,
// or an error saying why it cannot run here; auto (or empty) is
// Firecracker where it can run (FirecrackerReady), else QEMU. why says
// the reason for the choice.
func ChooseVMM(setting string, in firecracker.Install, accel, accelWhy string) (vmm, why string, err error) {
	if err := CheckVMM(setting); err != nil {
		return "", "", err
	}
	ok, reason := FirecrackerReady(in, accel, accelWhy)
	switch setting {
	case VMMQEMU:
		return VMMQEMU, "HELMR_MICROVM_VMM=qemu", nil
	case VMMFirecracker:
		if !ok {
			return "", "", fmt.Errorf("microvm tier: HELMR_MICROVM_VMM=firecracker, but Firecracker cannot run here: %s", reason)
		}
		return VMMFirecracker, "HELMR_MICROVM_VMM=firecracker: " + reason, nil
	}
	if ok {
		return VMMFirecracker, "auto: " + reason, nil
	}
	return VMMQEMU, "auto: Firecracker cannot run here (" + reason + ")", nil
}
