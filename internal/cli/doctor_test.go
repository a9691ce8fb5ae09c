package cli

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/helmr/helmr/internal/sandbox/tiers"
)

// TestWriteMicroVM: doctor names KVM (and PVM), whether a stock kernel
// boots, the VMMs installed, the tier's VMM and why, and why Firecracker's
// integration tests are not run where they cannot be.
func TestWriteMicroVM(t *testing.T) {
	tests := []struct {
		name string
		m    tiers.MicroVMHost
		want []string
	}{
		{"a PVM host without Firecracker", tiers.MicroVMHost{
			KVM:         "/dev/kvm present: a PVM hypervisor (kvm_pvm), which boots only PVM guest kernels",
			StockKernel: "no: /dev/kvm does not boot a stock kernel (a PVM hypervisor: it boots only PVM guest kernels): no answer in 20s",
			QEMU:        "QEMU emulator version 7.2.22 (/usr/bin/qemu-system-x86_64)", Firecracker: "firecracker not found, jailer not found",
			VMMSetting: "auto", VMM: "qemu", VMMWhy: "auto: Firecracker cannot run here (no firecracker binary, no jailer binary)",
			FirecrackerTests: "no firecracker binary, no jailer binary; /dev/kvm does not boot a stock kernel",
		}, []string{
			"microVM: KVM: /dev/kvm present: a PVM hypervisor (kvm_pvm), which boots only PVM guest kernels",
			"microVM: stock kernel under KVM: no: /dev/kvm does not boot a stock kernel (a PVM hypervisor: it boots only PVM guest kernels): no answer in 20s",
			"microVM: VMMs installed: QEMU QEMU emulator version 7.2.22 (/usr/bin/qemu-system-x86_64); firecracker not found, jailer not found",
			"microVM: the microvm tier's VMM (HELMR_MICROVM_VMM=auto): qemu (auto: Firecracker cannot run here (no firecracker binary, no jailer binary))",
			"Firecracker integration tests: not run on this host: no firecracker binary, no jailer binary; /dev/kvm does not boot a stock kernel",
		}},
		{"a KVM host with Firecracker", tiers.MicroVMHost{
			KVM: "/dev/kvm present", StockKernel: "yes: /dev/kvm boots the guest kernel", QEMU: "QEMU emulator version 8.2.2 (/usr/bin/qemu-system-x86_64)",
			Firecracker: "firecracker 1.10.1 (/usr/local/bin/firecracker), jailer 1.10.1 (/usr/local/bin/jailer)",
			VMMSetting:  "auto", VMM: "firecracker", VMMWhy: "auto: firecracker 1.10.1 and its jailer installed; /dev/kvm boots a stock kernel",
		}, []string{
			"microVM: KVM: /dev/kvm present",
			"microVM: stock kernel under KVM: yes: /dev/kvm boots the guest kernel",
			"microVM: VMMs installed: QEMU QEMU emulator version 8.2.2 (/usr/bin/qemu-system-x86_64); firecracker 1.10.1 (/usr/local/bin/firecracker), jailer 1.10.1 (/usr/local/bin/jailer)",
			"microVM: the microvm tier's VMM (HELMR_MICROVM_VMM=auto): firecracker (auto: firecracker 1.10.1 and its jailer installed; /dev/kvm boots a stock kernel)",
			"Firecracker integration tests: can run on this host",
		}},
		{"no tier", tiers.MicroVMHost{KVM: "no /dev/kvm", StockKernel: "not probed: qemu-system-x86_64 not found", QEMU: "not found",
			Firecracker: "firecracker not found, jailer not found", VMMSetting: "firecracker",
			VMMWhy: "the microvm tier is unavailable: qemu-system-x86_64 not found", FirecrackerTests: "no firecracker binary"},
			[]string{
				"microVM: KVM: no /dev/kvm",
				"microVM: stock kernel under KVM: not probed: qemu-system-x86_64 not found",
				"microVM: VMMs installed: QEMU not found; firecracker not found, jailer not found",
				"microVM: the microvm tier's VMM (HELMR_MICROVM_VMM=firecracker): none (the microvm tier is unavailable: qemu-system-x86_64 not found)",
				"Firecracker integration tests: not run on this host: no firecracker binary",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			writeMicroVM(&b, tt.m)
			if diff := cmp.Diff(tt.want, strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")); diff != "" {
				t.Errorf("writeMicroVM() lines (-want +got):\n%s", diff)
			}
		})
	}
}
