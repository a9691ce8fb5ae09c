package guest

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestVMBootArgs checks that what the host puts on the kernel command
// line reads back the same in the guest's init.
func TestVMBootArgs(t *testing.T) {
	mac, err := net.ParseMAC("02:48:4d:00:00:02")
	if err != nil {
		t.Fatal(err)
	}
	tests := []VMBoot{
		{Memory: 256 << 20, Pids: 64, MilliCPUs: 500},
		{Memory: 1 << 30, Pids: 1024, WorkspaceOwner: &[2]uint32{1000, 1001}, Net: &VMNet{
			Addr: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("10.0.2.2"),
			GatewayMAC: mac, MTU: 1500,
			Neighbours: []netip.Addr{netip.MustParseAddr("10.0.2.2"), netip.MustParseAddr("10.0.2.3")},
		}},
	}
	for _, want := range tests {
		cmdline := "console=ttyS0 quiet " + strings.Join(want.Args(), " ")
		got := parseVMBoot(cmdline)
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(VMBoot{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
			cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
			t.Errorf("parseVMBoot(%q) differs (-want +got):\n%s", cmdline, diff)
		}
	}
}

func TestParseVMNetRejects(t *testing.T) {
	for _, v := range []string{"", "10.0.2.15/24,10.0.2.2", "10.0.2.15,10.0.2.2,02:48:4d:00:00:02,1500,10.0.2.3",
		"10.0.2.15/24,10.0.2.2,nomac,1500,10.0.2.3", "10.0.2.15/24,10.0.2.2,02:48:4d:00:00:02,x,10.0.2.3"} {
		if n, err := parseVMNet(v); err == nil {
			t.Errorf("parseVMNet(%q) = %+v, nil; want an error", v, n)
		}
	}
}
