// Package network gives a sandbox its way out: a TAP interface inside the
// sandbox's own network namespace whose far end is a user-space TCP/IP
// stack (gVisor's netstack) in the worker. The worker terminates every
// connection and DNS lookup the sandbox makes and re-makes it from the
// host only if the operator's egress policy allows it, so the policy is
// enforced outside the sandbox, with no host firewall rules, no IP
// forwarding and no routes into the host's networks.
//
// Every sandbox sees the same small network (like slirp): its address
// 10.0.2.15/24 on eth0, the gateway 10.0.2.2 and a resolver at 10.0.2.3
// that forwards to the host's resolvers. Only IPv4, TCP and UDP leave the
// sandbox; ICMP (ping) does not.
//
// Whatever the policy, a sandbox never reaches the host's own addresses
// (so no port of the control plane or the worker), loopback, link-local
// metadata addresses, multicast, or the networks the operator adds to
// Config.Deny.
//
// # Names
//
// Under an allowlist the policy also reads the name a TCP connection asks
// for: the server name (SNI) of a TLS ClientHello, or the Host of an
// HTTP/1.x request head. A connection to an address allowed only because
// an allowed name resolved to it is reset if it names a host outside the
// allowlist. A connection to an address nobody resolved through the
// sandbox is accepted, and dialled only if it names an allowed host whose
// lookup by the worker (through Config.Upstream) includes that address,
// so names resolved elsewhere (/etc/hosts, a cache) work and a made-up
// server name sent to an arbitrary address does not. Addresses allowed by
// network (CIDR) are not checked by name.
//
// # Credentials injected at egress
//
// A sandbox's secrets can stay outside it: the sandbox holds a random
// placeholder (NewPlaceholder) and its Injector holds the value, bound to
// host names. Only a connection whose TLS server name (or, for plain
// HTTP, Host) is one of a credential's hosts is intercepted: the worker
// completes the guest's TLS handshake with a certificate for that name
// issued by the sandbox's own CA (which the sandbox trusts), opens TLS to
// the address the guest dialled, verifying the real certificate for that
// name against Config.UpstreamRoots (a failure fails the connection and
// is noticed, never falls back), and proxies HTTP/1.1 or HTTP/2 request
// by request. In each request the placeholders of the credentials bound
// to both the connection's name and the request's Host are replaced by
// their values in every header, inside Basic authorization, and, for
// credentials that allow it, in the body. In every response, headers and
// body, each credential's value and its encoded forms (package redact)
// are turned back into the placeholder's, so an echoing server cannot
// hand a value in.
//
// A placeholder is never substituted for a host it is not bound to, nor
// over plain HTTP (such requests to a bound host are proxied but sent
// as they are); both are noticed (Config.Notice). Every other connection
// (names bound to nothing, no name, protocols other than TLS and HTTP,
// servers that speak first) is relayed byte for byte: the sandbox sees
// the server's own certificate. A sandbox with no credentials under an
// open policy is not looked at at all.
package network

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// The sandbox's side of the network.
var (
	Subnet    = netip.MustParsePrefix("10.0.2.0/24")
	GuestAddr = netip.MustParseAddr("10.0.2.15")
	Gateway   = netip.MustParseAddr("10.0.2.2")
	DNSAddr   = netip.MustParseAddr("10.0.2.3")
)

// GuestInterface is the sandbox's interface name.
const GuestInterface = "eth0"

const (
	mtu        = 65520
	gatewayMAC = "\x02\x48\x4d\x00\x00\x02" // locally administered
	guestMAC   = "\x02\x48\x4d\x00\x00\x0f"

	dialTimeout    = 15 * time.Second
	udpIdleTimeout = 60 * time.Second
	maxInFlight    = 512
	maxReports     = 20

	// DefaultMaxFlows is Config.MaxFlows's default.
	DefaultMaxFlows = 1024
)

// Config is the worker-wide part of sandbox networking, shared by every
// sandbox the worker starts. Its fields must not change once a sandbox
// uses it.
type Config struct {
	Policy Policy
	// Upstream are the DNS servers the sandbox's resolver forwards to
	// (host side); default: the nameservers of the host's
	// /etc/resolv.conf.
	Upstream []netip.AddrPort
	// Deny are more networks no sandbox may reach, whatever the policy
	// (a remote control plane's addresses).
	Deny []netip.Prefix
	// Report, if set, is told about refused connections and lookups (at
	// most a few per sandbox, each destination once).
	Report func(sandboxID string, d Denial)
	// Tally, if set, is told about every refused connection and lookup,
	// reported or not (a metric counts them).
	Tally func(d Denial)
	// MaxFlows bounds the TCP connections and UDP flows one sandbox has
	// open through the worker at once, so that no sandbox can use up the
	// worker's descriptors (default DefaultMaxFlows).
	MaxFlows int
	Logger   *slog.Logger
	// UpstreamRoots verify the real upstream certificate of an
	// intercepted connection (nil: the host's system roots).
	UpstreamRoots *x509.CertPool
	// Notice, if set, is told about credential events of a sandbox, each
	// (secret, host, kind) once per sandbox: a placeholder sent to a host
	// it is not bound to (not substituted), a placeholder sent over plain
	// HTTP (never substituted: credentials go only over TLS), an upstream
	// whose certificate did not verify.
	Notice func(sandboxID string, n Notice)

	injMu     sync.Mutex
	injectors map[string]*Injector

	once      sync.Once
	g         *guard
	upstreams []netip.AddrPort
	upErr     error
}

func (c *Config) init() {
	c.once.Do(func() {
		c.g = &guard{extra: c.Deny}
		if c.MaxFlows <= 0 {
			c.MaxFlows = DefaultMaxFlows
		}
		if c.Logger == nil {
			c.Logger = slog.New(slog.DiscardHandler)
		}
		c.upstreams = c.Upstream
		if len(c.upstreams) == 0 {
			c.upstreams, c.upErr = hostResolvers("/etc/resolv.conf")
		}
	})
}

// Validate reports a config no sandbox could use.
func (c *Config) Validate() error {
	switch c.Policy.Mode {
	case Open, None, Allowlist, "":
	default:
		return fmt.Errorf("egress policy mode %q: want open, none or allowlist", c.Policy.Mode)
	}
	for _, u := range c.Upstream {
		if !u.IsValid() || u.Port() == 0 {
			return fmt.Errorf("DNS upstream %v: want IP:port", u)
		}
	}
	return nil
}

// Attaches reports whether sandboxes under this config get an interface
// (every policy but none).
func (c *Config) Attaches() bool { return c != nil && c.Policy.Mode != None }

// Denial is one connection or lookup the egress policy refused.
type Denial struct {
	Proto  string // "tcp", "udp" or "dns"
	Dest   string // address:port, or the name looked up
	Reason string
}

func (d Denial) String() string {
	what := d.Proto + " connection to " + d.Dest
	if d.Proto == "dns" {
		what = "DNS lookup of " + d.Dest
	}
	return what + " denied: " + d.Reason
}

// Link is one sandbox's interface and the worker's stack behind it.
type Link struct {
	id     string
	cfg    *Config
	fd     int
	mtu    int
	st     *stack.Stack
	ep     stack.LinkEndpoint
	netns  string // set if the link created (and so removes) the namespace
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	flows    int // open TCP connections and UDP flows (MaxFlows)
	conns    map[net.Conn]struct{}
	resolved map[netip.Addr]time.Time // allowlist: addresses allowed names resolved to, until
	reported map[string]bool
	closed   bool
}

// Attach gives the existing network namespace at nsPath (a sandbox
// process's /proc/PID/ns/net) the sandbox's interface. id names the
// sandbox in reports.
func Attach(nsPath, id string, cfg *Config) (*Link, error) {
	return attach(nsPath, false, id, cfg)
}

// Create makes a new network namespace bind-mounted at nsPath (a file
// that must not exist), gives it the sandbox's interface, and removes it
// on Close. For tiers that are handed a namespace path (runsc).
func Create(nsPath, id string, cfg *Config) (*Link, error) {
	return attach(nsPath, true, id, cfg)
}

func attach(nsPath string, create bool, id string, cfg *Config) (l *Link, err error) {
	if !cfg.Attaches() {
		return nil, errors.New("network: the egress policy attaches no interface")
	}
	cfg.init()
	fd := -1
	err = inNetns(nsPath, create, func() (err error) {
		fd, err = setupGuestSide(mtu)
		return err
	})
	if err != nil {
		if create {
			_ = removeNetns(nsPath)
		}
		return nil, fmt.Errorf("network: %w", err)
	}
	nsPathIfCreated := ""
	if create {
		nsPathIfCreated = nsPath
	}
	return newLink(id, cfg, fd, mtu, nsPathIfCreated)
}

// newLink starts the worker's stack on fd, the far end of the sandbox's
// interface, with frames of mtu bytes; the link removes netns, if set,
// when it closes.
func newLink(id string, cfg *Config, fd, mtu int, netns string) (*Link, error) {
	l := &Link{id: id, cfg: cfg, fd: fd, mtu: mtu, netns: netns, conns: map[net.Conn]struct{}{},
		resolved: map[netip.Addr]time.Time{}, reported: map[string]bool{}}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	if err := l.startStack(); err != nil {
		l.Close()
		return nil, fmt.Errorf("network: %w", err)
	}
	return l, nil
}

func (l *Link) startStack() error {
	ep, err := fdbased.New(&fdbased.Options{
		FDs: []int{l.fd}, MTU: uint32(l.mtu), EthernetHeader: true,
		Address: tcpip.LinkAddress(gatewayMAC), PacketDispatchMode: fdbased.Readv,
	})
	if err != nil {
		return fmt.Errorf("link endpoint: %w", err)
	}
	l.ep = ep
	l.st = stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	// Protocol options and handlers first: once the NIC exists its
	// dispatcher delivers the guest's packets, and they must find these.
	sack := tcpip.TCPSACKEnabled(true)
	l.st.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	tf := tcp.NewForwarder(l.st, 0, maxInFlight, l.forwardTCP)
	l.st.SetTransportProtocolHandler(tcp.ProtocolNumber, tf.HandlePacket)
	uf := udp.NewForwarder(l.st, l.forwardUDP)
	l.st.SetTransportProtocolHandler(udp.ProtocolNumber, uf.HandlePacket)
	const nic = 1
	if terr := l.st.CreateNIC(nic, ep); terr != nil {
		return fmt.Errorf("create NIC: %s", terr)
	}
	// Accept packets for any destination and answer from it: the stack
	// stands in for every host the sandbox talks to.
	l.st.SetPromiscuousMode(nic, true)
	l.st.SetSpoofing(nic, true)
	for _, a := range []netip.Addr{Gateway, DNSAddr} {
		pa := tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(a.As4()), PrefixLen: Subnet.Bits()}}
		if terr := l.st.AddProtocolAddress(nic, pa, stack.AddressProperties{}); terr != nil {
			return fmt.Errorf("add address %s: %s", a, terr)
		}
	}
	l.st.SetRouteTable([]tcpip.Route{{Destination: subnetTCPIP(), NIC: nic}})
	if terr := l.st.AddStaticNeighbor(nic, ipv4.ProtocolNumber, tcpip.AddrFrom4(GuestAddr.As4()), tcpip.LinkAddress(guestMAC)); terr != nil {
		return fmt.Errorf("static neighbour: %s", terr)
	}
	return nil
}

func subnetTCPIP() tcpip.Subnet {
	s, err := tcpip.NewSubnet(tcpip.AddrFrom4(Subnet.Addr().As4()), tcpip.MaskFromBytes(net.CIDRMask(Subnet.Bits(), 32)))
	if err != nil {
		panic(err)
	}
	return s
}

// Close tears the interface down: every relayed connection is closed, the
// stack stopped, the TAP (and a namespace the link created) removed.
func (l *Link) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	l.cancel()
	for c := range conns {
		c.Close()
	}
	if l.st != nil {
		l.st.Close()
		l.st.Wait()
	} else if l.ep != nil {
		l.ep.Close()
	}
	var errs []error
	if l.fd >= 0 {
		errs = append(errs, unix.Close(l.fd))
	}
	if l.netns != "" {
		errs = append(errs, removeNetns(l.netns))
	}
	return errors.Join(errs...)
}

// track registers conns so Close can end them; false if already closed.
func (l *Link) track(conns ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	for _, c := range conns {
		l.conns[c] = struct{}{}
	}
	return true
}

// reserve takes one of the sandbox's flows; false (and a denial) at the
// limit. Each true is paired with a release.
func (l *Link) reserve(proto string, dst netip.AddrPort) bool {
	l.mu.Lock()
	ok := l.flows < l.cfg.MaxFlows
	if ok {
		l.flows++
	}
	l.mu.Unlock()
	if !ok {
		l.deny(Denial{Proto: proto, Dest: dst.String(), Reason: fmt.Sprintf("the sandbox has %d connections open, its limit", l.cfg.MaxFlows)})
	}
	return ok
}

func (l *Link) release() {
	l.mu.Lock()
	l.flows--
	l.mu.Unlock()
}

func (l *Link) untrack(conns ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range conns {
		delete(l.conns, c)
		c.Close()
	}
}

// allowed returns why the sandbox may not reach a, or "".
func (l *Link) allowed(a netip.Addr) string {
	a = a.Unmap()
	if r := l.cfg.g.check(a); r != "" {
		return "never reachable from a sandbox (" + r + ")"
	}
	p := l.cfg.Policy
	if p.allowsPrefix(a) {
		return ""
	}
	if p.Mode == Allowlist {
		if l.resolvedAllows(a) {
			return ""
		}
		return "not in the egress allowlist (" + p.String() + ")"
	}
	return "egress policy " + p.String()
}

// resolvedAllows reports whether a is an address an allowed name
// resolved to (allowlist), not yet expired.
func (l *Link) resolvedAllows(a netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.resolved[a.Unmap()]
	return ok && time.Now().Before(until)
}

// remember allows a, which an allowed name resolved to, for ttl (at
// least minResolvedTTL, as clients cache answers).
func (l *Link) remember(a netip.Addr, ttl time.Duration) {
	if l.cfg.Policy.Mode != Allowlist {
		return
	}
	ttl = max(ttl, minResolvedTTL)
	l.mu.Lock()
	defer l.mu.Unlock()
	if until := time.Now().Add(ttl); until.After(l.resolved[a.Unmap()]) {
		l.resolved[a.Unmap()] = until
	}
}

const minResolvedTTL = 5 * time.Minute

// deny logs and reports d, each destination once and at most maxReports
// times per sandbox, so that a sandbox retrying in a loop floods neither
// the worker's log nor the run's events.
func (l *Link) deny(d Denial) {
	if l.cfg.Tally != nil {
		l.cfg.Tally(d)
	}
	key := d.Proto + " " + d.Dest
	l.mu.Lock()
	n := len(l.reported)
	first := !l.reported[key] && n <= maxReports
	if first {
		l.reported[key] = true
	}
	l.mu.Unlock()
	if !first {
		return
	}
	if n == maxReports {
		d = Denial{Proto: d.Proto, Dest: d.Dest, Reason: d.Reason + " (further denials are not reported)"}
	}
	l.cfg.Logger.Info("egress denied", "sandbox", l.id, "proto", d.Proto, "dest", d.Dest, "reason", d.Reason)
	if l.cfg.Report != nil {
		l.cfg.Report(l.id, d)
	}
}

func addrPort(a tcpip.Address, port uint16) netip.AddrPort {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return netip.AddrPortFrom(ip.Unmap(), port)
}

func (l *Link) forwardTCP(r *tcp.ForwarderRequest) {
	id := r.ID()
	dst := addrPort(id.LocalAddress, id.LocalPort)
	if dst.Addr() == DNSAddr && dst.Port() == 53 {
		if !l.reserve("tcp", dst) {
			r.Complete(true)
			return
		}
		defer l.release()
		var wq waiter.Queue
		ep, terr := r.CreateEndpoint(&wq)
		if terr != nil {
			r.Complete(true)
			return
		}
		r.Complete(false)
		c := gonet.NewTCPConn(&wq, ep)
		if !l.track(c) {
			c.Close()
			return
		}
		defer l.untrack(c)
		l.serveDNSTCP(c)
		return
	}
	a := dst.Addr()
	if why := l.cfg.g.check(a); why != "" {
		l.deny(Denial{Proto: "tcp", Dest: dst.String(), Reason: "never reachable from a sandbox (" + why + ")"})
		r.Complete(true)
		return
	}
	p := l.cfg.Policy
	byPrefix := p.allowsPrefix(a) // open: every address
	inj := l.cfg.injector(l.id)
	if byPrefix && inj.snapshot() == nil {
		l.relay(r, dst)
		return
	}
	byName := !byPrefix && l.resolvedAllows(a)
	if !byPrefix && !byName && len(p.Domains) == 0 {
		l.deny(Denial{Proto: "tcp", Dest: dst.String(), Reason: "not in the egress allowlist (" + p.String() + ")"})
		r.Complete(true)
		return
	}
	l.sniffAndForward(r, dst, inj, byPrefix, byName)
}

// dialer makes the host-side connections; its Control re-checks the
// address actually dialled.
func (l *Link) dialer() *net.Dialer {
	return &net.Dialer{Control: func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return err
		}
		if why := l.allowed(ap.Addr()); why != "" {
			return fmt.Errorf("egress to %s denied: %s", address, why)
		}
		return nil
	}}
}

// relayTCP copies both ways, passing half-closes on, until both are done.
func relayTCP(guest *gonet.TCPConn, host *net.TCPConn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = host.ReadFrom(guest)
		_ = host.CloseWrite()
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(guest, host)
		_ = guest.CloseWrite()
	}()
	wg.Wait()
}

func (l *Link) forwardUDP(r *udp.ForwarderRequest) bool {
	id := r.ID()
	dst := addrPort(id.LocalAddress, id.LocalPort)
	isDNS := dst.Addr() == DNSAddr && dst.Port() == 53
	if !isDNS {
		if why := l.allowed(dst.Addr()); why != "" {
			l.deny(Denial{Proto: "udp", Dest: dst.String(), Reason: why})
			return true
		}
	}
	if !l.reserve("udp", dst) {
		return true
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		l.release()
		return true
	}
	guest := gonet.NewUDPConn(&wq, ep)
	if !l.track(guest) {
		guest.Close()
		l.release()
		return true
	}
	if isDNS {
		go func() {
			defer l.release()
			defer l.untrack(guest)
			l.serveDNSUDP(guest)
		}()
		return true
	}
	go func() {
		defer l.release()
		defer l.untrack(guest)
		ctx, cancel := context.WithTimeout(l.ctx, dialTimeout)
		c, err := l.dialer().DialContext(ctx, "udp", dst.String())
		cancel()
		if err != nil {
			return
		}
		host := c.(*net.UDPConn)
		if !l.track(host) {
			host.Close()
			return
		}
		defer l.untrack(host)
		relayUDP(guest, host)
	}()
	return true
}

// relayUDP copies datagrams both ways until neither side sent one for
// udpIdleTimeout.
func relayUDP(guest *gonet.UDPConn, host *net.UDPConn) {
	var last sync.Mutex
	seen := time.Now()
	touch := func() { last.Lock(); seen = time.Now(); last.Unlock() }
	idle := func() bool { last.Lock(); defer last.Unlock(); return time.Since(seen) > udpIdleTimeout }
	pump := func(from, to net.Conn) {
		buf := make([]byte, 65535)
		for {
			_ = from.SetReadDeadline(time.Now().Add(udpIdleTimeout))
			n, err := from.Read(buf)
			if err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() && !idle() {
					continue
				}
				guest.Close()
				host.Close()
				return
			}
			touch()
			if _, err := to.Write(buf[:n]); err != nil && !isTemporary(err) {
				guest.Close()
				host.Close()
				return
			}
		}
	}
	done := make(chan struct{})
	go func() { pump(host, guest); close(done) }()
	pump(guest, host)
	<-done
}

func isTemporary(err error) bool {
	return errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, os.ErrDeadlineExceeded)
}
