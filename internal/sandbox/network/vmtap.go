package network

import (
	"fmt"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Devices of NewVMTap's namespace besides the VMM's TAP.
const (
	vmTapWorker = "hw0"
	vmTapBridge = "br0"
)

// NewVMTap gives a VM whose VMM opens a TAP device by name itself
// (Firecracker, whose jailer closes every descriptor it is handed) the
// sandbox's network. It makes a network namespace bind-mounted at nsPath
// (a file that must not exist) holding the TAP device tap, persistent and
// owned by uid:gid, for the VMM to attach to from inside the namespace
// (the jailer's --netns); a second TAP device whose descriptor the
// worker's stack holds; and a bridge joining the two, so that the guest's
// frames reach the stack and the stack's reach the guest, with the
// namespace's own stack out of the way (no address on any device, IPv6
// off). The guest sets its interface up as NewWire says (GuestAddr,
// GuestMAC, WireMTU, the gateway's permanent neighbour entries). The Link
// has the same stack, policy and reports as Attach's; its Close removes
// the namespace and so the devices. id names the sandbox in reports.
func NewVMTap(nsPath, id, tap string, uid, gid uint32, cfg *Config) (*Link, error) {
	if !cfg.Attaches() {
		return nil, fmt.Errorf("network: the egress policy attaches no interface")
	}
	cfg.init()
	fd := -1
	err := inNetns(nsPath, true, func() (err error) {
		fd, err = setupVMTap(tap, uid, gid)
		return err
	})
	if err != nil {
		_ = removeNetns(nsPath)
		return nil, fmt.Errorf("network: %w", err)
	}
	return newLink(id, cfg, fd, WireMTU, nsPath)
}

// setupVMTap runs inside the new namespace: it makes the VMM's TAP, the
// worker's TAP (whose descriptor it returns) and the bridge.
func setupVMTap(tap string, uid, gid uint32) (int, error) {
	for _, p := range []string{"/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"} {
		_ = os.WriteFile(p, []byte("1"), 0) // no IPv6 chatter on the guest's wire; a kernel without IPv6 has none
	}
	if err := persistentTap(tap, uid, gid); err != nil {
		return -1, err
	}
	fd, err := openTap(vmTapWorker)
	if err != nil {
		return -1, err
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: vmTapBridge, MTU: WireMTU}}
	if err := netlink.LinkAdd(br); err != nil {
		return -1, fmt.Errorf("bridge %s: %w", vmTapBridge, err)
	}
	for _, name := range []string{tap, vmTapWorker} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return -1, fmt.Errorf("find %s: %w", name, err)
		}
		if err := netlink.LinkSetMTU(l, WireMTU); err != nil {
			return -1, fmt.Errorf("%s: set MTU: %w", name, err)
		}
		if err := netlink.LinkSetMaster(l, br); err != nil {
			return -1, fmt.Errorf("%s: join %s: %w", name, vmTapBridge, err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			return -1, fmt.Errorf("%s: up: %w", name, err)
		}
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return -1, fmt.Errorf("%s: up: %w", vmTapBridge, err)
	}
	ok = true
	return fd, nil
}

// persistentTap makes the TAP device name, persistent (it outlives the
// descriptor that made it) and owned by uid:gid, who may attach to it
// without privileges.
func persistentTap(name string, uid, gid uint32) error {
	fd, err := openTap(name)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, s := range []struct {
		what string
		req  uint
		arg  uintptr
	}{
		{"owner", unix.TUNSETOWNER, uintptr(uid)},
		{"group", unix.TUNSETGROUP, uintptr(gid)},
		{"persist", unix.TUNSETPERSIST, 1},
	} {
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(s.req), s.arg); errno != 0 {
			return fmt.Errorf("TAP device %s: set %s: %w", name, s.what, errno)
		}
	}
	return nil
}

// NewNamespace makes an empty network namespace (loopback only, down)
// bind-mounted at nsPath, a file that must not exist: for a VMM process
// of a sandbox without a network, so that it holds no socket of the
// host's. RemoveNamespace removes it.
func NewNamespace(nsPath string) error {
	if err := inNetns(nsPath, true, func() error { return nil }); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	return nil
}

// RemoveNamespace unmounts and removes a namespace NewNamespace made.
func RemoveNamespace(nsPath string) error {
	if err := removeNetns(nsPath); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	return nil
}
