package network

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// inNetns runs fn on an OS thread that has joined the network namespace
// at nsPath (create: a new one, bind-mounted at nsPath). The thread is
// returned to the Go runtime only if it got back into the worker's own
// namespace; otherwise it exits with its goroutine.
func inNetns(nsPath string, create bool, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open own network namespace: %w", err)
			return
		}
		defer orig.Close()
		if create {
			err = newNetns(nsPath)
		} else {
			err = joinNetns(nsPath)
		}
		if err != nil {
			if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			}
			errc <- err
			return
		}
		err = fn()
		if rerr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); rerr != nil {
			// Stay locked: the thread dies with this goroutine.
			errc <- errors.Join(err, fmt.Errorf("return to the worker's network namespace: %w", rerr))
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

func joinNetns(nsPath string) error {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open network namespace: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("join network namespace %s: %w", nsPath, err)
	}
	return nil
}

// newNetns moves the calling (locked) thread into a new network namespace
// and bind-mounts it at nsPath, so that it outlives the thread.
func newNetns(nsPath string) error {
	f, err := os.OpenFile(nsPath, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("create network namespace file: %w", err)
	}
	f.Close()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		os.Remove(nsPath)
		return fmt.Errorf("new network namespace: %w", err)
	}
	if err := unix.Mount("/proc/thread-self/ns/net", nsPath, "", unix.MS_BIND, ""); err != nil {
		os.Remove(nsPath)
		return fmt.Errorf("bind-mount network namespace: %w", err)
	}
	return nil
}

// removeNetns unmounts and removes a namespace newNetns made.
func removeNetns(nsPath string) error {
	if err := unix.Unmount(nsPath, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount network namespace: %w", err)
	}
	if err := os.Remove(nsPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// setupGuestSide runs inside the sandbox's namespace: it brings lo up and
// creates the TAP device eth0 with the guest's address, a default route
// through the gateway, and permanent neighbour entries for the gateway and
// the resolver (so the guest never has to ARP). It returns the TAP's
// descriptor, close-on-exec, which the worker's stack reads and writes.
func setupGuestSide(mtu int) (int, error) {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return -1, fmt.Errorf("loopback: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return -1, fmt.Errorf("loopback up: %w", err)
	}
	fd, err := openTap(GuestInterface)
	if err != nil {
		return -1, err
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	link, err := netlink.LinkByName(GuestInterface)
	if err != nil {
		return -1, fmt.Errorf("find %s: %w", GuestInterface, err)
	}
	steps := []struct {
		what string
		fn   func() error
	}{
		{"set MAC", func() error { return netlink.LinkSetHardwareAddr(link, net.HardwareAddr(guestMAC)) }},
		{"set MTU", func() error { return netlink.LinkSetMTU(link, mtu) }},
		{"add address", func() error {
			return netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: GuestAddr.AsSlice(), Mask: net.CIDRMask(Subnet.Bits(), 32)}})
		}},
		{"up", func() error { return netlink.LinkSetUp(link) }},
		{"default route", func() error {
			return netlink.RouteAdd(&netlink.Route{LinkIndex: link.Attrs().Index, Gw: Gateway.AsSlice()})
		}},
		{"neighbours", func() error {
			for _, ip := range []net.IP{Gateway.AsSlice(), DNSAddr.AsSlice()} {
				if err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: link.Attrs().Index, Family: netlink.FAMILY_V4,
					State: netlink.NUD_PERMANENT, IP: ip, HardwareAddr: net.HardwareAddr(gatewayMAC)}); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := s.fn(); err != nil {
			return -1, fmt.Errorf("%s: %s: %w", GuestInterface, s.what, err)
		}
	}
	ok = true
	return fd, nil
}

// openTap creates a non-persistent TAP device (gone when fd closes).
func openTap(name string) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var ifr struct {
		name  [unix.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(ifr.name[:], name)
	ifr.flags = unix.IFF_TAP | unix.IFF_NO_PI
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("create TAP device %s: %w", name, errno)
	}
	return fd, nil
}
