package tiers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/microvm"
	"github.com/helmr/helmr/internal/sandbox/microvm/firecracker"
	"github.com/helmr/helmr/internal/sandbox/microvm/guestfmt"
)

// microVMTier runs each sandbox in a VM of its own: QEMU's microvm
// machine or, on KVM hosts where it is installed, a jailed Firecracker
// (Host.MicroVMVMM picks; microvm.ChooseVMM). scripts/install-microvm.sh
// installs QEMU and the guest kernel; Firecracker comes from the operator.
// It is available wherever a VMM and the kernel are, but a hardware
// boundary only under KVM: under TCG (a host whose /dev/kvm does not boot
// a stock kernel, or none) QEMU emulates the guest, which is no security
// boundary, so Auto never picks it there (AutoPick) and its detail says
// so. Its state is StateRoot/microvm, kept from other users.
var microVMTier = Tier{
	Name:      "microvm",
	Strength:  HardwareVM,
	Isolation: "hardware VM (QEMU microvm or Firecracker; KVM only, TCG is emulation)",
	// Its guests take no image build steps yet: its workers run them on
	// gvisor where it is available.
	BuildElsewhere: true,
	Probe: func(h Host) (string, error) {
		accel, why, err := microVMAccel(h)
		if err != nil {
			return "", err
		}
		vmm, _, err := microvm.ChooseVMM(h.MicroVMVMM, findFirecracker(h), accel, why)
		if err != nil {
			return "", err
		}
		if vmm == microvm.VMMFirecracker {
			return "Firecracker (jailed) under KVM: " + why, nil
		}
		if accel == microvm.AccelKVM {
			return "QEMU microvm under KVM: " + why, nil
		}
		return "QEMU microvm under TCG, emulation and NOT a security boundary (auto never picks it): " + why, nil
	},
	AutoPick: func(h Host) bool {
		accel, _, err := microVMAccel(h)
		return err == nil && accel == microvm.AccelKVM
	},
	New: func(ctx context.Context, h Host) (sandbox.Runtime, error) {
		k, err := guestfmt.FindKernel(h.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("microvm tier: %w", err)
		}
		dir, err := stateDir(h, h.StateRoot, []string{"microvm", h.Instance}, false)
		if err != nil {
			return nil, fmt.Errorf("microvm tier: %w", err)
		}
		return microvm.New(ctx, microvm.Config{Kernel: k, AgentPath: h.Agent, StateDir: dir, Logger: h.logger(),
			VMM: h.MicroVMVMM, Firecracker: findFirecracker(h)})
	},
}

// findFirecracker finds Firecracker's binaries in PATH or CacheDir/bin.
func findFirecracker(h Host) firecracker.Install {
	return firecracker.Find(filepath.Join(h.CacheDir, "bin"))
}

// microVMAccel finds QEMU and the kernel and probes the accelerator (once
// per process: see microvm.ChooseAccel). The probe's initramfs is kept in
// the cache (CacheDir/microvm/probe).
func microVMAccel(h Host) (accel, why string, err error) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return "", "", errors.New("qemu-system-x86_64 not found (run scripts/install-microvm.sh)")
	}
	k, err := guestfmt.FindKernel(h.CacheDir)
	if err != nil {
		return "", "", err
	}
	if os.Geteuid() != 0 {
		return "", "", errors.New("needs root (QEMU runs as a uid of its own, in a cgroup of its own)")
	}
	if h.Agent == "" {
		return "", "", errors.New("helmr-agent not found (the guest's init)")
	}
	dir := filepath.Join(h.CacheDir, "microvm", "probe")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	initramfs, err := guestfmt.BuildInitramfs(dir, h.Agent, k)
	if err != nil {
		return "", "", err
	}
	accel, why = microvm.ChooseAccel(qemu, k.Bzimage, initramfs)
	return accel, why, nil
}

// MicroVMHost is what this host offers the microvm tier, for helmr
// doctor: KVM, whether it boots a stock kernel, the VMMs installed, the
// VMM the tier would use, and whether Firecracker's integration tests can
// run here.
type MicroVMHost struct {
	// KVM says whether /dev/kvm is here, and names a PVM hypervisor.
	KVM string `json:"kvm"`
	// StockKernel says whether a stock kernel boots under KVM (the
	// probe's answer), or why it was not probed.
	StockKernel string `json:"stockKernel"`
	// QEMU and Firecracker say what is installed of each.
	QEMU        string `json:"qemu"`
	Firecracker string `json:"firecracker"`
	// VMMSetting is HELMR_MICROVM_VMM; VMM the VMM the tier would use
	// (empty: none) and VMMWhy why.
	VMMSetting string `json:"vmmSetting"`
	VMM        string `json:"vmm"`
	VMMWhy     string `json:"vmmWhy"`
	// FirecrackerTests is empty where Firecracker's integration tests
	// can run here, else why they cannot.
	FirecrackerTests string `json:"firecrackerTestsNotRun,omitempty"`
}

// ProbeMicroVMHost probes what this host offers the microvm tier.
func ProbeMicroVMHost(h Host) MicroVMHost {
	setting := h.MicroVMVMM
	if setting == "" {
		setting = microvm.VMMAuto
	}
	m := MicroVMHost{VMMSetting: setting}
	present, pvm := microvm.KVMPresent()
	switch {
	case !present:
		m.KVM = "no /dev/kvm"
	case pvm:
		m.KVM = "/dev/kvm present: a PVM hypervisor (kvm_pvm), which boots only PVM guest kernels"
	default:
		m.KVM = "/dev/kvm present"
	}
	if qemu, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		m.QEMU = "not found (scripts/install-microvm.sh installs it)"
	} else if v, err := microvm.QEMUVersion(qemu); err != nil {
		m.QEMU = qemu + " (" + err.Error() + ")"
	} else {
		m.QEMU = v + " (" + qemu + ")"
	}
	in := findFirecracker(h)
	m.Firecracker = in.String()
	if err := in.Usable(); err != nil && (in.Firecracker != "" || in.Jailer != "") {
		m.Firecracker += ": unusable: " + err.Error()
	}
	accel, why, err := microVMAccel(h)
	if err != nil {
		m.StockKernel = "not probed: " + err.Error()
		why = "KVM not probed: " + err.Error()
	} else if accel == microvm.AccelKVM {
		m.StockKernel = "yes: " + why
	} else {
		m.StockKernel = "no: " + why
	}
	if ok, reason := microvm.FirecrackerReady(in, accel, why); !ok {
		m.FirecrackerTests = reason
	}
	if err != nil {
		m.VMMWhy = "the microvm tier is unavailable: " + err.Error()
		return m
	}
	m.VMM, m.VMMWhy, err = microvm.ChooseVMM(h.MicroVMVMM, in, accel, why)
	if err != nil {
		m.VMMWhy = err.Error()
	}
	return m
}
