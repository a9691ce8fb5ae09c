package network

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// sniffAndForward is the path of a connection whose first bytes matter:
// the sandbox has credentials to inject, or the allowlist decides by the
// name the connection asks for. byPrefix: dst is allowed by address;
// byName: dst is allowed because an allowed name resolved to it. Allowed
// addresses are dialled before the guest's connection is accepted (so a
// refused connection stays refused); others are accepted, sniffed, then
// dialled or reset.
func (l *Link) sniffAndForward(r *tcp.ForwarderRequest, dst netip.AddrPort, inj *Injector, byPrefix, byName bool) {
	if !l.reserve("tcp", dst) {
		r.Complete(true)
		return
	}
	defer l.release()
	var host *net.TCPConn
	if byPrefix || byName {
		var err error
		if host, err = l.dial(dst); err != nil {
			r.Complete(true)
			return
		}
	}
	guest, ep, ok := l.accept(r, host)
	if !ok {
		return
	}
	defer func() {
		l.untrack(guest)
		if host != nil {
			l.untrack(host)
		}
	}()
	var s sniffed
	if host != nil {
		s = sniff(guest, host)
	} else {
		s = sniff(guest, nil)
	}
	if !byPrefix {
		if why := l.checkName(dst, s, byName); why != "" {
			l.deny(Denial{Proto: "tcp", Dest: dst.String(), Reason: why})
			ep.Abort()
			return
		}
		if host == nil {
			h, err := l.dial(dst)
			if err != nil {
				ep.Abort()
				return
			}
			if !l.track(h) {
				h.Close()
				return
			}
			host = h
		}
	}
	if set := inj.snapshot(); set != nil && !s.hostFirst && s.kind != kindOther && s.name != "" {
		if set.binds(s.name) {
			l.intercept(inj, guest, host, dst, s)
			return
		}
		if s.kind == kindHTTP {
			set.noticeUnbound(inj, s.name, s.guest)
		}
	}
	passThrough(guest, host, s)
}

// passThrough relays a sniffed connection: what each side sent already,
// then both ways as relayTCP.
func passThrough(guest *gonet.TCPConn, host *net.TCPConn, s sniffed) {
	if len(s.guest) > 0 {
		if _, err := host.Write(s.guest); err != nil {
			return
		}
	}
	if len(s.host) > 0 {
		if _, err := guest.Write(s.host); err != nil {
			return
		}
	}
	relayTCP(guest, host)
}

// checkName returns why the allowlist refuses a connection to dst, an
// address not in its networks, given the name it asked for ("" if
// allowed). resolved: an allowed name resolved to dst through the
// sandbox's resolver, so the connection is refused only if it names a
// host outside the allowlist. Otherwise it must name an allowed host that
// the worker's own lookup resolves to dst.
func (l *Link) checkName(dst netip.AddrPort, s sniffed, resolved bool) string {
	p := l.cfg.Policy
	what := "its HTTP Host"
	if s.kind == kindTLS {
		what = "its TLS server name"
	}
	if s.incomplete {
		return "the connection did not say in time which host it is for (" + p.String() + ")"
	}
	if resolved {
		if s.name != "" && !p.AllowsName(s.name) {
			return fmt.Sprintf("%s %s is not in the egress allowlist (%s)", what, s.name, p.String())
		}
		return ""
	}
	if s.name == "" {
		return "not in the egress allowlist (" + p.String() + ")"
	}
	if !p.AllowsName(s.name) {
		return fmt.Sprintf("not in the egress allowlist, nor is %s %s (%s)", what, s.name, p.String())
	}
	addrs, ttl, err := l.lookupA(s.name)
	if err != nil {
		return fmt.Sprintf("not in the egress allowlist, and the lookup of %s %s failed: %v", what, s.name, err)
	}
	if !slices.Contains(addrs, dst.Addr()) {
		return fmt.Sprintf("not in the egress allowlist, and %s %s does not resolve to it", what, s.name)
	}
	l.remember(dst.Addr(), ttl)
	return ""
}

// lookupA resolves name's IPv4 addresses through the upstream servers the
// sandbox's resolver uses, with the answer's smallest TTL.
func (l *Link) lookupA(name string) ([]netip.Addr, time.Duration, error) {
	n, err := dnsmessage.NewName(name + ".")
	if err != nil {
		return nil, 0, err
	}
	var idb [2]byte
	_, _ = rand.Read(idb[:])
	id := binary.BigEndian.Uint16(idb[:])
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: n, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		return nil, 0, err
	}
	resp, err := l.exchange(q, id, "udp")
	if err != nil {
		return nil, 0, err
	}
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return nil, 0, err
	}
	if h.RCode != dnsmessage.RCodeSuccess {
		return nil, 0, errors.New(h.RCode.String())
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil, 0, err
	}
	var addrs []netip.Addr
	ttl := time.Duration(-1)
	for {
		ah, err := p.AnswerHeader()
		if err != nil {
			break
		}
		if ah.Type != dnsmessage.TypeA {
			if p.SkipAnswer() != nil {
				break
			}
			continue
		}
		a, err := p.AResource()
		if err != nil {
			break
		}
		addrs = append(addrs, netip.AddrFrom4(a.A))
		if d := time.Duration(ah.TTL) * time.Second; ttl < 0 || d < ttl {
			ttl = d
		}
	}
	return addrs, max(ttl, 0), nil
}

// relay is a connection's plain path: dial, then accept the guest's
// connection and copy both ways.
func (l *Link) relay(r *tcp.ForwarderRequest, dst netip.AddrPort) {
	if !l.reserve("tcp", dst) {
		r.Complete(true)
		return
	}
	defer l.release()
	host, err := l.dial(dst)
	if err != nil {
		r.Complete(true)
		return
	}
	guest, _, ok := l.accept(r, host)
	if !ok {
		return
	}
	defer l.untrack(guest, host)
	relayTCP(guest, host)
}

// dial connects to dst from the host.
func (l *Link) dial(dst netip.AddrPort) (*net.TCPConn, error) {
	ctx, cancel := context.WithTimeout(l.ctx, dialTimeout)
	defer cancel()
	c, err := l.dialer().DialContext(ctx, "tcp", dst.String())
	if err != nil {
		l.cfg.Logger.Debug("egress dial failed", "sandbox", l.id, "dest", dst, "err", err)
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// accept completes the guest's connection and tracks it (and host, if
// not nil); on failure it closes host.
func (l *Link) accept(r *tcp.ForwarderRequest, host *net.TCPConn) (*gonet.TCPConn, tcpip.Endpoint, bool) {
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		if host != nil {
			host.Close()
		}
		r.Complete(true)
		return nil, nil, false
	}
	r.Complete(false)
	guest := gonet.NewTCPConn(&wq, ep)
	conns := []net.Conn{guest}
	if host != nil {
		conns = append(conns, host)
	}
	if !l.track(conns...) {
		for _, c := range conns {
			c.Close()
		}
		return nil, nil, false
	}
	return guest, ep, true
}
