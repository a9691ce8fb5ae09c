package guest

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// vmInterface is the guest's virtio-net interface.
const vmInterface = "eth0"

const vmArgNet = "helmr.net="

// VMNet is the guest's side of the sandbox's network (the worker's stack
// stands behind the virtio-net device): the init sets eth0 up with Addr,
// MTU, the default route through Gateway and permanent neighbour entries
// with GatewayMAC for Neighbours (the gateway and the resolver), so that
// the guest never has to ARP.
type VMNet struct {
	Addr       netip.Prefix
	Gateway    netip.Addr
	GatewayMAC net.HardwareAddr
	Neighbours []netip.Addr
	MTU        int
}

// arg is n as one kernel command line argument.
func (n *VMNet) arg() string {
	var neigh []string
	for _, a := range n.Neighbours {
		neigh = append(neigh, a.String())
	}
	return vmArgNet + strings.Join([]string{n.Addr.String(), n.Gateway.String(), n.GatewayMAC.String(),
		strconv.Itoa(n.MTU), strings.Join(neigh, "+")}, ",")
}

// parseVMNet reads arg's value.
func parseVMNet(v string) (*VMNet, error) {
	f := strings.Split(v, ",")
	if len(f) != 5 {
		return nil, fmt.Errorf("%s%s: want addr/bits,gateway,mac,mtu,neighbours", vmArgNet, v)
	}
	var n VMNet
	var err error
	if n.Addr, err = netip.ParsePrefix(f[0]); err != nil {
		return nil, err
	}
	if n.Gateway, err = netip.ParseAddr(f[1]); err != nil {
		return nil, err
	}
	if n.GatewayMAC, err = net.ParseMAC(f[2]); err != nil {
		return nil, err
	}
	if n.MTU, err = strconv.Atoi(f[3]); err != nil {
		return nil, err
	}
	for _, s := range strings.Split(f[4], "+") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, err
		}
		n.Neighbours = append(n.Neighbours, a)
	}
	return &n, nil
}

// up sets eth0 up as n says, waiting for the device to appear once its
// driver is loaded.
func (n *VMNet) up() error {
	var link netlink.Link
	var err error
	for deadline := time.Now().Add(vmDeviceWait); ; {
		if link, err = netlink.LinkByName(vmInterface); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("vm init: no %s: %w", vmInterface, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	idx := link.Attrs().Index
	steps := []struct {
		what string
		fn   func() error
	}{
		{"set MTU", func() error { return netlink.LinkSetMTU(link, n.MTU) }},
		{"add address", func() error {
			return netlink.AddrAdd(link, &netlink.Addr{IPNet: &net.IPNet{IP: n.Addr.Addr().AsSlice(), Mask: net.CIDRMask(n.Addr.Bits(), 32)}})
		}},
		{"up", func() error { return netlink.LinkSetUp(link) }},
		{"default route", func() error { return netlink.RouteAdd(&netlink.Route{LinkIndex: idx, Gw: n.Gateway.AsSlice()}) }},
		{"neighbours", func() error {
			for _, a := range n.Neighbours {
				err := netlink.NeighAdd(&netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4,
					State: netlink.NUD_PERMANENT, IP: a.AsSlice(), HardwareAddr: n.GatewayMAC})
				if err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, s := range steps {
		if err := s.fn(); err != nil {
			return fmt.Errorf("vm init: %s: %s: %w", vmInterface, s.what, err)
		}
	}
	return nil
}
