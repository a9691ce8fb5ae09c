package network

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// neverReachable are the networks no policy opens to a sandbox: the
// host's loopback, link-local addresses (cloud metadata services live at
// 169.254.169.254 and fd00:ec2::254), "this network", multicast and the
// reserved ranges, and the sandbox's own virtual network (whose gateway
// is the worker).
var neverReachable = []struct {
	pfx    netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "host loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (metadata) address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved or broadcast address"},
	{Subnet, "the sandbox's virtual network"},
	{netip.MustParsePrefix("::/128"), "unspecified address"},
	{netip.MustParsePrefix("::1/128"), "host loopback"},
	{netip.MustParsePrefix("fe80::/10"), "link-local (metadata) address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "link-local (metadata) address"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// guard refuses the addresses no sandbox may reach whatever the policy:
// neverReachable, every address of the host itself (so no port of the
// control plane or the worker, whatever address it listens on), and the
// operator's extra networks (a remote control plane's addresses).
type guard struct {
	extra []netip.Prefix

	mu      sync.Mutex
	host    map[netip.Addr]bool
	hostAt  time.Time
	hostErr error
}

// hostAddrTTL is how long the host's own addresses are cached.
const hostAddrTTL = 2 * time.Second

// check returns why a is never reachable, or "" if the policy decides.
func (g *guard) check(a netip.Addr) string {
	a = a.Unmap()
	for _, n := range neverReachable {
		if n.pfx.Contains(a) {
			return n.reason
		}
	}
	for _, p := range g.extra {
		if p.Contains(a) {
			return "the control plane's address"
		}
	}
	owned, err := g.hostOwned(a)
	if err != nil {
		return "the host's addresses are unknown (" + err.Error() + ")"
	}
	if owned {
		return "an address of the worker's host"
	}
	return ""
}

func (g *guard) hostOwned(a netip.Addr) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.host == nil || time.Since(g.hostAt) > hostAddrTTL {
		addrs, err := net.InterfaceAddrs()
		g.hostAt, g.hostErr = time.Now(), err
		if err == nil {
			g.host = map[netip.Addr]bool{}
			for _, ad := range addrs {
				if ipn, ok := ad.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
						g.host[ip.Unmap()] = true
					}
				}
			}
		}
	}
	if g.hostErr != nil {
		return false, g.hostErr
	}
	return g.host[a], nil
}
