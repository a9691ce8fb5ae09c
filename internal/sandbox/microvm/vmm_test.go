package microvm

import (
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/sandbox/microvm/firecracker"
)

func TestChooseVMM(t *testing.T) {
	installed := firecracker.Install{Firecracker: "/usr/local/bin/firecracker", Jailer: "/usr/local/bin/jailer",
		Version: firecracker.Version{1, 10, 1}, JailerVersion: firecracker.Version{1, 10, 1}}
	pvm := "/dev/kvm does not boot a stock kernel (a PVM hypervisor: it boots only PVM guest kernels): no answer in 20s"
	tests := []struct {
		name            string
		setting         string
		in              firecracker.Install
		accel, accelWhy string
		want, wantWhy   string // wantWhy: a substring of why, or of the error
		wantErr         bool
	}{
		{"auto on a KVM host with firecracker", "auto", installed, AccelKVM, "/dev/kvm boots the guest kernel", VMMFirecracker, "auto: firecracker 1.10.1", false},
		{"empty is auto", "", installed, AccelKVM, "", VMMFirecracker, "auto:", false},
		{"auto without firecracker", "auto", firecracker.Install{}, AccelKVM, "", VMMQEMU, "no firecracker binary, no jailer binary", false},
		{"auto under PVM", "auto", installed, AccelTCG, pvm, VMMQEMU, "PVM", false},
		{"auto, nothing", "auto", firecracker.Install{}, AccelTCG, pvm, VMMQEMU, "no firecracker binary, no jailer binary (in PATH or $HELMR_CACHE_DIR/bin); /dev/kvm does not boot", false},
		{"qemu by name", "qemu", installed, AccelKVM, "", VMMQEMU, "HELMR_MICROVM_VMM=qemu", false},
		{"firecracker by name", "firecracker", installed, AccelKVM, "", VMMFirecracker, "HELMR_MICROVM_VMM=firecracker", false},
		{"firecracker by name under PVM", "firecracker", installed, AccelTCG, pvm, "", "cannot run here: " + pvm, true},
		{"firecracker too old", "firecracker", firecracker.Install{Firecracker: "/f", Jailer: "/j",
			Version: firecracker.Version{1, 7, 0}, JailerVersion: firecracker.Version{1, 7, 0}}, AccelKVM, "", "", "older than 1.8.0", true},
		{"unknown", "cloud-hypervisor", installed, AccelKVM, "", "", "want qemu, firecracker or auto", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why, err := ChooseVMM(tt.setting, tt.in, tt.accel, tt.accelWhy)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), tt.wantWhy) {
					t.Errorf("ChooseVMM(%q) = %q, %q, %v; want an error containing %q", tt.setting, got, why, err, tt.wantWhy)
				}
				return
			}
			if err != nil || got != tt.want || !strings.Contains(why, tt.wantWhy) {
				t.Errorf("ChooseVMM(%q) = %q, %q, %v; want %q and a reason containing %q", tt.setting, got, why, err, tt.want, tt.wantWhy)
			}
		})
	}
}
