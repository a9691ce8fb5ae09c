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
	"github.com/helmr/helmr/internal/sandbox/microvm/guestfmt"
)

// microVMTier runs each sandbox in a QEMU microvm (scripts/install-microvm.sh
// installs QEMU and the guest kernel). It is available wherever those are,
// but a hardware boundary only under KVM: under TCG (a host whose /dev/kvm
// does not boot a stock kernel, or none) QEMU emulates the guest, which is
// no security boundary, so Auto never picks it there (AutoPick) and its
// detail says so. Its state is StateRoot/microvm, kept from other users.
var microVMTier = Tier{
	Name:      "microvm",
	Strength:  HardwareVM,
	Isolation: "hardware VM (QEMU microvm; KVM only, TCG is emulation)",
	Probe: func(h Host) (string, error) {
		accel, why, err := microVMAccel(h)
		if err != nil {
			return "", err
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
		return microvm.New(ctx, microvm.Config{Kernel: k, AgentPath: h.Agent, StateDir: dir, Logger: h.logger()})
	},
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
