package guest

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
)

// vmInterface is the guest's virtio-net interface.
const vmInterface = "eth0"

// VMNet is the guest's side of the sandbox's network (the worker's stack
// stands behind the virtio-net device): the init sets eth0 up with Addr,
// MTU, the default route through Gateway and permanent neighbour entries
// with GatewayMAC for Neighbours (the gateway and the resolver), so that
// the guest never has to ARP.
type VMNet struct {
	Addr       netip.Prefix     `json:"addr"`
	Gateway    netip.Addr       `json:"gateway"`
	GatewayMAC net.HardwareAddr `json:"gateway_mac"`
	Neighbours []netip.Addr     `json:"neighbours"`
	MTU        int              `json:"mtu"`
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
