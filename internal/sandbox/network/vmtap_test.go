package network

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/helmr/helmr/internal/sandbox/network/nettest"
	"github.com/helmr/helmr/internal/testenv"
)

// TestVMTap stands a VMM and its guest in for Firecracker: the test
// attaches to the VMM's TAP device in the sandbox's namespace as a VMM
// does, and carries its frames to and from a TAP device in a namespace
// of its own set up as a guest sets up its interface (setupGuestSide).
// Through the bridge and the worker's stack the guest reaches a test
// host and resolves a name; the VMM's TAP is persistent and its owner is
// the VMM's uid.
func TestVMTap(t *testing.T) {
	testenv.RequireRoot(t)
	h := nettest.NewHost(t)
	port := h.Serve(t, h.Addr, 0, "hello through the bridge")
	dns := h.ServeDNS(t, h.Addr, map[string]netip.Addr{"svc.helmr.test": h.Addr})
	p, err := ParsePolicy("open")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &Config{Policy: p, Upstream: []netip.AddrPort{dns.Addr}}
	dir := t.TempDir()
	nsPath := filepath.Join(dir, "sandbox-netns")
	link, err := NewVMTap(nsPath, "sbx-vm", "fc0", 64055, 64056, cfg)
	if err != nil {
		t.Fatalf("NewVMTap() = %v", err)
	}
	defer func() {
		if err := link.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		if _, err := os.Stat(nsPath); !os.IsNotExist(err) {
			t.Errorf("namespace after Close: %v, want removed", err)
		}
	}()

	var tap *netlink.Tuntap
	if err := inNetns(nsPath, false, func() error {
		l, err := netlink.LinkByName("fc0")
		if err != nil {
			return err
		}
		tap, _ = l.(*netlink.Tuntap)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if tap == nil || tap.NonPersist || tap.Owner != 64055 || tap.Group != 64056 {
		t.Errorf("VMM's TAP = %+v, want persistent, owner 64055, group 64056", tap)
	}

	// The VMM: attach to fc0. The guest: eth0 in a namespace of its own.
	vmm := -1
	if err := inNetns(nsPath, false, func() (err error) { vmm, err = openTap("fc0"); return err }); err != nil {
		t.Fatalf("attach to fc0: %v", err)
	}
	guestNS := filepath.Join(dir, "guest-netns")
	guest := -1
	if err := inNetns(guestNS, true, func() (err error) { guest, err = setupGuestSide(WireMTU); return err }); err != nil {
		t.Fatalf("guest namespace: %v", err)
	}
	defer removeNetns(guestNS)
	vf, gf := os.NewFile(uintptr(vmm), "vmm-tap"), os.NewFile(uintptr(guest), "guest-tap")
	defer vf.Close()
	defer gf.Close()
	go io.Copy(vf, gf) // guest → VMM → bridge
	go io.Copy(gf, vf) // bridge → VMM → guest

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c, err := nettest.Dial(ctx, guestNS, "tcp", netip.AddrPortFrom(h.Addr, uint16(port)).String())
	if err != nil {
		t.Fatalf("dial the test host from the guest: %v", err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(got) != "hello through the bridge" {
		t.Errorf("test host said %q, %v; want its greeting", got, err)
	}
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return nettest.Dial(ctx, guestNS, network, netip.AddrPortFrom(DNSAddr, 53).String())
	}}
	addrs, err := r.LookupHost(ctx, "svc.helmr.test")
	if err != nil || !slices.Equal(addrs, []string{h.Addr.String()}) {
		t.Errorf("lookup from the guest = %v, %v; want [%s]", addrs, err, h.Addr)
	}
}
