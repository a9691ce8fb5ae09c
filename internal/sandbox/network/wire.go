package network

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// The sandbox's side of the network, for a guest that sets its interface
// up itself (a VM's kernel; see NewWire).
var (
	GuestMAC   = net.HardwareAddr(guestMAC)
	GatewayMAC = net.HardwareAddr(gatewayMAC)
)

// WireMTU is the MTU of a wire (NewWire): a VM's virtio-net interface at
// its default.
const WireMTU = 1500

// wireBuffer is each end's socket buffer: room for a burst of frames.
const wireBuffer = 4 << 20

// NewWire gives a VM the sandbox's network over a datagram socket pair,
// one Ethernet frame per datagram, instead of a TAP device: the returned
// file is the guest's end, for the VMM to carry the guest's frames over
// (QEMU's -netdev dgram with a local fd); the Link holds the worker's end
// and the same stack, policy and reports as Attach. The guest sets its
// interface up as setupGuestSide does a TAP's: GuestAddr in Subnet with
// GuestMAC and WireMTU, the default route through Gateway, and permanent
// neighbour entries with GatewayMAC for Gateway and DNSAddr. id names the
// sandbox in reports.
func NewWire(id string, cfg *Config) (*Link, *os.File, error) {
	if !cfg.Attaches() {
		return nil, nil, errors.New("network: the egress policy attaches no interface")
	}
	cfg.init()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("network: wire: %w", err)
	}
	for _, fd := range fds {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, wireBuffer)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, wireBuffer)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("network: wire: %w", err)
	}
	l, err := newLink(id, cfg, fds[0], WireMTU, "")
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	return l, os.NewFile(uintptr(fds[1]), "network-wire"), nil
}
