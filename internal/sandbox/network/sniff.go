package network

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// What a connection's first bytes say it is.
type protoKind int

const (
	kindOther protoKind = iota // neither TLS nor HTTP/1.x, or not known
	kindTLS                    // a TLS ClientHello
	kindHTTP                   // an HTTP/1.x request head
)

const (
	// sniffTimeout bounds how long a guest takes to send a whole
	// ClientHello or request head once it started, and how long it may
	// stay silent on a connection whose upstream is not dialled yet.
	sniffTimeout = 10 * time.Second
	// silentTimeout is how long a guest may stay silent on a connection
	// to an address not allowed yet (only what it says can allow it).
	silentTimeout = 3 * time.Second
	// maxHead bounds an HTTP request head read to find its Host.
	maxHead = 32 << 10
	// firstRead is the size of the first read from either side.
	firstRead = 4 << 10
)

// sniffed is what sniff learnt of a connection.
type sniffed struct {
	guest []byte // what the guest sent (to replay upstream or to a TLS server)
	host  []byte // what the upstream sent first, if it spoke first
	// hostFirst: the upstream spoke (or closed) before the guest said
	// anything: a server-speaks-first protocol, passed through.
	hostFirst bool
	kind      protoKind
	name      string // the SNI or Host name (canonicalHost); "" if none
	// incomplete: the guest started a ClientHello or a request head and
	// did not finish it in time; its name is unknown.
	incomplete bool
}

type readResult struct {
	b   []byte
	err error
}

// sniff reads the guest's first bytes to learn the protocol and the name
// it asks for. With an upstream already dialled (host not nil), whichever
// side speaks first decides: if it is the upstream, the connection is
// passed through as it is. Without one, a guest silent for sniffTimeout
// gives up. Nothing is written to either side.
func sniff(guest, host net.Conn) sniffed {
	var s sniffed
	gch := make(chan readResult, 1)
	go func() {
		b := make([]byte, firstRead)
		n, err := guest.Read(b)
		gch <- readResult{b[:n], err}
	}()
	var g readResult
	if host == nil {
		_ = guest.SetReadDeadline(time.Now().Add(silentTimeout))
		g = <-gch
	} else {
		hch := make(chan readResult, 1)
		go func() {
			b := make([]byte, firstRead)
			n, err := host.Read(b)
			hch <- readResult{b[:n], err}
		}()
		var h readResult
		select {
		case g = <-gch:
			_ = host.SetReadDeadline(time.Now())
			h = <-hch
			_ = host.SetReadDeadline(time.Time{})
		case h = <-hch:
			_ = guest.SetReadDeadline(time.Now())
			g = <-gch
			_ = guest.SetReadDeadline(time.Time{})
		}
		s.host = h.b
		s.hostFirst = len(h.b) > 0 || (h.err != nil && !isTimeout(h.err))
	}
	s.guest = g.b
	if s.hostFirst || len(g.b) == 0 {
		return s
	}
	_ = guest.SetReadDeadline(time.Now().Add(sniffTimeout))
	defer guest.SetReadDeadline(time.Time{})
	rest := io.MultiReader(bytes.NewReader(g.b), guest)
	switch c := g.b[0]; {
	case c == 0x16: // TLS handshake record
		sniffTLS(&s, rest)
	case c >= 'A' && c <= 'Z':
		sniffHTTP(&s, rest)
	}
	return s
}

var errSniffed = errors.New("client hello read")

// sniffTLS runs a TLS server handshake on what the guest sends, up to the
// parsed ClientHello, recording the bytes it reads.
func sniffTLS(s *sniffed, r io.Reader) {
	rc := &recordConn{r: r}
	var hello *tls.ClientHelloInfo
	err := tls.Server(rc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		hello = h
		return nil, errSniffed
	}}).Handshake()
	s.guest = rc.rec.Bytes()
	switch {
	case hello != nil:
		s.kind, s.name = kindTLS, canonicalHost(hello.ServerName)
	case isTimeout(err):
		s.incomplete = true
	}
}

// sniffHTTP reads an HTTP/1.x request head and takes its Host.
func sniffHTTP(s *sniffed, r io.Reader) {
	var head bytes.Buffer
	buf := make([]byte, firstRead)
	for head.Len() < maxHead {
		n, err := r.Read(buf)
		head.Write(buf[:n])
		if bytes.Contains(head.Bytes(), []byte("\r\n\r\n")) || bytes.Contains(head.Bytes(), []byte("\n\n")) {
			break
		}
		if err != nil {
			s.incomplete = isTimeout(err)
			s.guest = head.Bytes()
			return
		}
	}
	s.guest = head.Bytes()
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head.Bytes())))
	if err != nil {
		return
	}
	s.kind, s.name = kindHTTP, canonicalHost(req.Host)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// recordConn is a net.Conn that reads from r, recording what it read,
// and discards what is written to it.
type recordConn struct {
	r   io.Reader
	rec bytes.Buffer
}

func (c *recordConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.rec.Write(p[:n])
	return n, err
}
func (c *recordConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *recordConn) Close() error                     { return nil }
func (c *recordConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *recordConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *recordConn) SetDeadline(time.Time) error      { return nil }
func (c *recordConn) SetReadDeadline(time.Time) error  { return nil }
func (c *recordConn) SetWriteDeadline(time.Time) error { return nil }

// prefixConn is a connection whose first reads return prefix.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func withPrefix(c net.Conn, prefix []byte) net.Conn {
	if len(prefix) == 0 {
		return c
	}
	return &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(prefix), c)}
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }
