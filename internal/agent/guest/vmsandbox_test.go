package guest

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestVMCtlRoundTrip checks that what the host sends on the control
// channel reads back the same in the guest's init.
func TestVMCtlRoundTrip(t *testing.T) {
	mac, err := net.ParseMAC("02:48:4d:00:00:02")
	if err != nil {
		t.Fatal(err)
	}
	seed := bytes.Repeat([]byte{7}, 32)
	tests := []VMCtl{
		{Type: VMCtlIdle},
		{Type: VMCtlStart, Start: &VMStart{Boot: VMBoot{Memory: 256 << 20, Pids: 64, MilliCPUs: 500}, Fresh: VMFresh{TimeNs: 1, Seed: seed}}},
		{Type: VMCtlStart, Start: &VMStart{Fresh: VMFresh{TimeNs: 1_700_000_000_123_456_789, Seed: seed}, Boot: VMBoot{
			Memory: 1 << 30, Pids: 1024, WorkspaceOwner: &[2]uint32{1000, 1001}, Net: &VMNet{
				Addr: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("10.0.2.2"),
				GatewayMAC: mac, MTU: 1500,
				Neighbours: []netip.Addr{netip.MustParseAddr("10.0.2.2"), netip.MustParseAddr("10.0.2.3")},
			}}}},
		{Type: VMCtlResume, Fresh: &VMFresh{TimeNs: 42, Seed: seed}},
		{Type: VMCtlError, Error: "vm init: mount disk workspace: invalid argument"},
	}
	var wire bytes.Buffer
	host := newVMCtl(&wire)
	for _, m := range tests {
		if err := host.send(m); err != nil {
			t.Fatalf("send(%+v) = %v", m, err)
		}
	}
	guest := newVMCtl(&wire)
	for _, want := range tests {
		got, err := guest.read()
		if err != nil {
			t.Fatalf("read() = %v, want %+v", err, want)
		}
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
			cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
			t.Errorf("control message differs (-want +got):\n%s", diff)
		}
	}
}

// TestVMCtlWaitStart checks that the init skips what is not start, and
// that a malformed line or an ended channel is an error, not a start.
func TestVMCtlWaitStart(t *testing.T) {
	in := bytes.NewBufferString(`{"type":"resume","fresh":{"time_ns":1}}` + "\n" + `{"type":"start"}` + "\n" +
		`{"type":"start","start":{"boot":{"memory":5}}}` + "\n")
	s, err := newVMCtl(in).waitStart()
	if err != nil || s.Boot.Memory != 5 {
		t.Fatalf("waitStart() = %+v, %v; want the start with memory 5", s, err)
	}
	for _, bad := range []string{"", "{not json\n", `{"type":"start"`} {
		if s, err := newVMCtl(bytes.NewBufferString(bad)).waitStart(); err == nil {
			t.Errorf("waitStart(%q) = %+v, nil; want an error", bad, s)
		}
	}
}

func TestVMFreshRefusesShortSeed(t *testing.T) {
	if err := (VMFresh{Seed: make([]byte, 8)}).apply(); err == nil {
		t.Error("apply(8-byte seed) = nil, want an error")
	}
}

func TestValidMachineID(t *testing.T) {
	for id, want := range map[string]bool{
		"0123456789abcdef0123456789abcdef":  true,
		"0123456789ABCDEF0123456789abcdef":  false,
		"0123456789abcdef0123456789abcde":   false,
		"0123456789abcdef0123456789abcdef0": false,
		"0123456789abcdef0123456789abcde\n": false,
		"":                                  false,
	} {
		if got := validMachineID(id); got != want {
			t.Errorf("validMachineID(%q) = %v, want %v", id, got, want)
		}
	}
}
