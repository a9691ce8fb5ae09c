package network

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
)

// The sandbox's resolver (DNSAddr:53, UDP and TCP) answers each query
// itself when the policy refuses the name (REFUSED) or asks for IPv6
// addresses the sandbox cannot use (an empty answer), and otherwise
// forwards it to the upstream servers from the host. Under an allowlist,
// the IPv4 addresses an allowed name resolves to become reachable.

const (
	dnsTimeout     = 4 * time.Second
	dnsIdleTimeout = 10 * time.Second
)

func (l *Link) serveDNSUDP(c *gonet.UDPConn) {
	buf := make([]byte, 65535)
	for {
		_ = c.SetReadDeadline(time.Now().Add(dnsIdleTimeout))
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if resp := l.answer(buf[:n], "udp"); resp != nil {
			if _, err := c.Write(resp); err != nil {
				return
			}
		}
	}
}

func (l *Link) serveDNSTCP(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		_ = c.SetDeadline(time.Now().Add(dnsIdleTimeout))
		q, err := readTCPMsg(r)
		if err != nil {
			return
		}
		resp := l.answer(q, "tcp")
		if resp == nil {
			return
		}
		if err := writeTCPMsg(c, resp); err != nil {
			return
		}
	}
}

func readTCPMsg(r io.Reader) ([]byte, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	msg := make([]byte, binary.BigEndian.Uint16(n[:]))
	_, err := io.ReadFull(r, msg)
	return msg, err
}

func writeTCPMsg(w io.Writer, msg []byte) error {
	out := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(out, uint16(len(msg)))
	copy(out[2:], msg)
	_, err := w.Write(out)
	return err
}

// answer returns the response to query q (nil: drop it).
func (l *Link) answer(q []byte, transport string) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return reply(h, qs, dnsmessage.RCodeFormatError)
	}
	name := strings.TrimSuffix(qs[0].Name.String(), ".")
	if !l.cfg.Policy.AllowsName(name) {
		l.deny(Denial{Proto: "dns", Dest: name, Reason: "not in the egress allowlist (" + l.cfg.Policy.String() + ")"})
		return reply(h, qs, dnsmessage.RCodeRefused)
	}
	if qs[0].Type == dnsmessage.TypeAAAA {
		return reply(h, qs, dnsmessage.RCodeSuccess)
	}
	resp, err := l.exchange(q, h.ID, transport)
	if err != nil {
		l.cfg.Logger.Debug("dns upstream failed", "sandbox", l.id, "name", name, "err", err)
		return reply(h, qs, dnsmessage.RCodeServerFailure)
	}
	l.learn(resp)
	return resp
}

// reply builds a response with no records.
func reply(h dnsmessage.Header, qs []dnsmessage.Question, rcode dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rcode})
	_ = b.StartQuestions()
	for _, q := range qs {
		_ = b.Question(q)
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// learn records the A records of an allowed name's answer.
func (l *Link) learn(resp []byte) {
	if l.cfg.Policy.Mode != Allowlist {
		return
	}
	var p dnsmessage.Parser
	if _, err := p.Start(resp); err != nil {
		return
	}
	if err := p.SkipAllQuestions(); err != nil {
		return
	}
	for {
		h, err := p.AnswerHeader()
		if err != nil {
			return
		}
		if h.Type != dnsmessage.TypeA {
			if err := p.SkipAnswer(); err != nil {
				return
			}
			continue
		}
		a, err := p.AResource()
		if err != nil {
			return
		}
		l.remember(netip.AddrFrom4(a.A), time.Duration(h.TTL)*time.Second)
	}
}

// exchange forwards q to the upstream servers in order until one answers.
func (l *Link) exchange(q []byte, id uint16, transport string) ([]byte, error) {
	if l.cfg.upErr != nil {
		return nil, l.cfg.upErr
	}
	if len(l.cfg.upstreams) == 0 {
		return nil, errors.New("no upstream DNS servers")
	}
	var errs []error
	for _, up := range l.cfg.upstreams {
		resp, err := exchangeWith(l.ctx, up, q, transport)
		if err == nil && (len(resp) < 2 || binary.BigEndian.Uint16(resp) != id) {
			err = errors.New("response with another id")
		}
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", up, err))
	}
	return nil, errors.Join(errs...)
}

func exchangeWith(ctx context.Context, up netip.AddrPort, q []byte, transport string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, dnsTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, transport, up.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	if transport == "tcp" {
		if err := writeTCPMsg(c, q); err != nil {
			return nil, err
		}
		return readTCPMsg(c)
	}
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// HostResolvers are the nameservers of the host's /etc/resolv.conf, the
// default upstream of sandboxes' DNS.
func HostResolvers() ([]netip.AddrPort, error) { return hostResolvers("/etc/resolv.conf") }

// hostResolvers reads the nameservers of a resolv.conf.
func hostResolvers(path string) ([]netip.AddrPort, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read host resolvers: %w", err)
	}
	var out []netip.AddrPort
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		host, _, _ := strings.Cut(f[1], "%")
		if a, err := netip.ParseAddr(host); err == nil {
			out = append(out, netip.AddrPortFrom(a.Unmap(), 53))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no nameserver in %s", path)
	}
	return out, nil
}

// ParseUpstreams reads "IP[:port],..." (port default 53).
func ParseUpstreams(s string) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if ap, err := netip.ParseAddrPort(e); err == nil {
			out = append(out, ap)
			continue
		}
		a, err := netip.ParseAddr(strings.Trim(e, "[]"))
		if err != nil {
			return nil, fmt.Errorf("DNS upstream %q: want IP or IP:port", e)
		}
		out = append(out, netip.AddrPortFrom(a, 53))
	}
	return out, nil
}
