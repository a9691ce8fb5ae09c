// Package nettest gives network tests hosts to talk to that this machine
// owns: a network namespace the test creates, joined to the host by a veth
// pair on a /24 of 198.18.0.0/15 (the range set aside for network tests),
// with servers listening inside it. No test traffic leaves the machine.
package nettest

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// TB is the part of testing.TB the helpers use (benchmark programs under
// bench/ provide their own).
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Host is a test host: a network namespace with two addresses, reachable
// from the host through a veth pair.
type Host struct {
	Name   string     // namespace name (ip netns)
	Path   string     // namespace path
	Local  netip.Addr // the host's end of the veth (owned by this machine's root namespace)
	Addr   netip.Addr // the test host's first address (x.x.x.2)
	Addr2  netip.Addr // its second address (x.x.x.3)
	Subnet netip.Prefix
}

// NewHost creates a test host, removed when t ends. It needs root and
// iproute2's ip.
func NewHost(t TB) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("nettest: needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("nettest: needs iproute2's ip: ", err)
	}
	suffix := randHex(3)
	h := &Host{Name: "helmrt-" + suffix}
	h.Path = "/run/netns/" + h.Name
	sub, err := freeSubnet()
	if err != nil {
		t.Fatal(err)
	}
	h.Subnet = sub
	b := sub.Addr().As4()
	b[3] = 1
	h.Local = netip.AddrFrom4(b)
	b[3] = 2
	h.Addr = netip.AddrFrom4(b)
	b[3] = 3
	h.Addr2 = netip.AddrFrom4(b)
	hv, nv := "hv"+suffix, "nv"+suffix
	run(t, "ip", "netns", "add", h.Name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", h.Name).Run() })
	run(t, "ip", "link", "add", hv, "type", "veth", "peer", "name", nv, "netns", h.Name)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hv).Run() })
	run(t, "ip", "addr", "add", h.Local.String()+"/24", "dev", hv)
	run(t, "ip", "link", "set", hv, "up")
	in := []string{"ip", "netns", "exec", h.Name}
	run(t, append(in, "ip", "addr", "add", h.Addr.String()+"/24", "dev", nv)...)
	run(t, append(in, "ip", "addr", "add", h.Addr2.String()+"/24", "dev", nv)...)
	run(t, append(in, "ip", "link", "set", nv, "up")...)
	run(t, append(in, "ip", "link", "set", "lo", "up")...)
	return h
}

// freeSubnet picks a /24 of 198.18.0.0/15 that no route of this machine
// uses.
func freeSubnet() (netip.Prefix, error) {
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("nettest: list routes: %w", err)
	}
	for range 64 {
		var b [1]byte
		_, _ = rand.Read(b[:])
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, b[0], 0}), 24)
		if !strings.Contains(string(out), strings.TrimSuffix(p.Addr().String(), ".0")+".") {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("nettest: no free /24 in 198.18.0.0/16")
}

func run(t TB, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// In runs fn on a thread inside the namespace at nsPath; sockets fn
// creates stay in that namespace.
func In(nsPath string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		err = fn()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// serveTCP listens on addr:port inside the test host until t ends, runs
// handle on each connection (in its own goroutine) and closes it after;
// it returns the port.
func (h *Host) serveTCP(t TB, addr netip.Addr, port int, handle func(net.Conn)) int {
	t.Helper()
	var ln net.Listener
	if err := In(h.Path, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, uint16(port)).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// Serve starts a TCP server on addr:port (0: any) inside the test host
// that writes reply to every connection and closes it. It returns the port.
func (h *Host) Serve(t TB, addr netip.Addr, port int, reply string) int {
	t.Helper()
	return h.serveTCP(t, addr, port, func(c net.Conn) { _, _ = io.WriteString(c, reply) })
}

// ServeHold starts a TCP server on addr inside the test host that writes
// "hi\n" to every connection and keeps it open until the client closes it.
// It returns the port.
func (h *Host) ServeHold(t TB, addr netip.Addr) int {
	t.Helper()
	return h.serveTCP(t, addr, 0, func(c net.Conn) {
		_, _ = io.WriteString(c, "hi\n")
		_, _ = io.Copy(io.Discard, c)
	})
}

// ServeBulk starts a TCP server on addr inside the test host that writes
// n bytes to every connection and closes it. It returns the port.
func (h *Host) ServeBulk(t TB, addr netip.Addr, n int64) int {
	t.Helper()
	buf := make([]byte, 256<<10)
	return h.serveTCP(t, addr, 0, func(c net.Conn) {
		for left := n; left > 0; {
			k, err := c.Write(buf[:min(int64(len(buf)), left)])
			if err != nil {
				return
			}
			left -= int64(k)
		}
	})
}

// ServeUDPEcho starts a UDP echo server on addr inside the test host and
// returns its port.
func (h *Host) ServeUDPEcho(t TB, addr netip.Addr) int {
	t.Helper()
	var pc net.PacketConn
	if err := In(h.Path, func() (err error) {
		pc, err = net.ListenPacket("udp", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("echo:"), buf[:n]...), from)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).Port
}

// DNS is an authoritative test DNS server in a test host: it answers A
// queries from its records, NXDOMAIN otherwise, and remembers every name
// it was asked.
type DNS struct {
	Addr netip.AddrPort

	mu      sync.Mutex
	records map[string]netip.Addr
	asked   []string
}

// ServeDNS starts a DNS server on addr:53 (UDP and TCP) inside the test
// host. records maps names (no trailing dot) to IPv4 addresses.
func (h *Host) ServeDNS(t TB, addr netip.Addr, records map[string]netip.Addr) *DNS {
	t.Helper()
	d := &DNS{Addr: netip.AddrPortFrom(addr, 53), records: records}
	var pc net.PacketConn
	if err := In(h.Path, func() (err error) {
		pc, err = net.ListenPacket("udp", d.Addr.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := d.answer(buf[:n]); resp != nil {
				_, _ = pc.WriteTo(resp, from)
			}
		}
	}()
	h.serveTCP(t, addr, 53, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		r := bufio.NewReader(c)
		var n [2]byte
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(n[:]))
		if _, err := io.ReadFull(r, q); err != nil {
			return
		}
		resp := d.answer(q)
		out := binary.BigEndian.AppendUint16(nil, uint16(len(resp)))
		_, _ = c.Write(append(out, resp...))
	})
	return d
}

// Asked returns the names queried so far.
func (d *DNS) Asked() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

func (d *DNS) answer(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	name := strings.TrimSuffix(qs[0].Name.String(), ".")
	d.mu.Lock()
	d.asked = append(d.asked, name)
	a, ok := d.records[name]
	d.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !ok {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	_ = b.StartQuestions()
	_ = b.Question(qs[0])
	if ok && qs[0].Type == dnsmessage.TypeA {
		_ = b.StartAnswers()
		_ = b.AResource(dnsmessage.ResourceHeader{Name: qs[0].Name, Class: dnsmessage.ClassINET, TTL: 30},
			dnsmessage.AResource{A: a.As4()})
	}
	out, _ := b.Finish()
	return out
}

// Dial connects from inside the namespace at nsPath.
func Dial(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := In(nsPath, func() (err error) {
		var d net.Dialer
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// ServeHTTP serves h over HTTP on addr (any port) inside the test host
// until t ends, and returns the port.
func (h *Host) ServeHTTP(t TB, addr netip.Addr, handler http.Handler) int {
	t.Helper()
	var ln net.Listener
	if err := In(h.Path, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	t.Cleanup(func() { srv.Close() })
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().(*net.TCPAddr).Port
}

// TLS is a test certificate authority for HTTPS test hosts.
type TLS struct {
	Pool *x509.CertPool // trusts the CA
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// NewTLS makes a test CA.
func NewTLS(t TB) *TLS {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nettest CA " + randHex(4)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &TLS{Pool: pool, cert: cert, key: key}
}

// PEM is the CA's certificate, PEM-encoded (for a trust file).
func (c *TLS) PEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw})
}

// Cert issues a server certificate for names (DNS names or IP
// addresses).
func (c *TLS) Cert(t TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, n := range names {
		if a, err := netip.ParseAddr(n); err == nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// ServeHTTPS serves handler over HTTPS (HTTP/2 and HTTP/1.1) with cert on
// addr (any port) inside the test host until t ends, and returns the
// port.
func (h *Host) ServeHTTPS(t TB, addr netip.Addr, cert tls.Certificate, handler http.Handler) int {
	t.Helper()
	var ln net.Listener
	if err := In(h.Path, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}, ErrorLog: log.New(io.Discard, "", 0)}
	t.Cleanup(func() { srv.Close() })
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	return ln.Addr().(*net.TCPAddr).Port
}
