package network

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

const (
	// handshakeTimeout bounds each TLS handshake of an intercepted
	// connection (the guest's and the upstream's).
	handshakeTimeout = 15 * time.Second
	// proxyIdleTimeout closes an intercepted connection, guest or
	// upstream side, idle between requests for this long.
	proxyIdleTimeout = 2 * time.Minute
	// maxBufferedBody bounds a request body read whole to fix its
	// Content-Length (a substitution that changes its length); larger
	// ones are refused with 413.
	maxBufferedBody = 16 << 20
)

var (
	errEncoding  = errors.New("the upstream answered with a content encoding other than gzip")
	discardLog   = log.New(io.Discard, "", 0)
	proxyBuffers = &bufferPool{}
)

// interception is one intercepted guest connection to a bound host: an
// HTTP server on the guest's side whose handler forwards each request,
// substituted, through a transport of its own to the address the guest
// dialled.
type interception struct {
	l    *Link
	inj  *Injector
	name string // the bound name (SNI or Host) the connection was made to
	dst  netip.AddrPort
	tls  bool // HTTPS; plain HTTP is proxied but never substituted

	mu    sync.Mutex
	first net.Conn // the upstream connection already made, until the transport takes it

	tr       *http.Transport
	rp       *httputil.ReverseProxy
	handlers sync.WaitGroup
}

// intercept serves the guest's connection (what sniff read of it first
// in s.guest) to a name bound to a credential. host is the upstream
// connection, to dst; both are tracked by the caller and closed after.
func (l *Link) intercept(inj *Injector, guest, host net.Conn, dst netip.AddrPort, s sniffed) {
	ic := &interception{l: l, inj: inj, name: s.name, dst: dst, tls: s.kind == kindTLS}
	ic.tr = &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return ic.dial(ctx) },
		DialTLSContext:      func(ctx context.Context, _, _ string) (net.Conn, error) { return ic.dial(ctx) },
		ForceAttemptHTTP2:   true,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     proxyIdleTimeout,
	}
	defer ic.tr.CloseIdleConnections()
	ic.rp = &httputil.ReverseProxy{
		Rewrite:        ic.rewrite,
		Transport:      ic.tr,
		FlushInterval:  -1,
		BufferPool:     proxyBuffers,
		ModifyResponse: ic.modifyResponse,
		ErrorHandler:   ic.proxyError,
		ErrorLog:       discardLog,
	}
	gc := withPrefix(guest, s.guest)
	if !ic.tls {
		ic.first = host
		ic.serveHTTP1(gc)
		return
	}
	up := tls.Client(host, ic.upstreamTLS())
	upErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(l.ctx, handshakeTimeout)
		defer cancel()
		upErr <- up.HandshakeContext(ctx)
	}()
	gt := tls.Server(gc, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return inj.ca.leaf(s.name)
		},
	})
	ctx, cancel := context.WithTimeout(l.ctx, handshakeTimeout)
	gErr := gt.HandshakeContext(ctx)
	cancel()
	if gErr != nil {
		host.Close() // ends the upstream handshake
	}
	if err := <-upErr; err != nil {
		ic.upstreamFailed(err)
		return
	}
	if gErr != nil {
		l.cfg.Logger.Debug("egress interception: guest handshake failed", "sandbox", l.id, "host", s.name, "err", gErr)
		return
	}
	ic.first = up
	if gt.ConnectionState().NegotiatedProtocol == "h2" {
		(&http2.Server{IdleTimeout: proxyIdleTimeout}).ServeConn(gt, &http2.ServeConnOpts{
			Context: l.ctx, Handler: ic, BaseConfig: &http.Server{ErrorLog: discardLog}})
		return
	}
	ic.serveHTTP1(gt)
}

func (ic *interception) upstreamTLS() *tls.Config {
	return &tls.Config{ServerName: ic.name, RootCAs: ic.l.cfg.UpstreamRoots, NextProtos: []string{"h2", "http/1.1"}}
}

// upstreamFailed notices an upstream certificate that did not verify.
func (ic *interception) upstreamFailed(err error) {
	var cv *tls.CertificateVerificationError
	if !errors.As(err, &cv) {
		ic.l.cfg.Logger.Debug("egress interception: upstream handshake failed", "sandbox", ic.l.id, "host", ic.name, "err", err)
		return
	}
	ic.l.cfg.Logger.Info("egress interception: upstream certificate not verified", "sandbox", ic.l.id, "host", ic.name, "dest", ic.dst, "err", cv.Err)
	set := ic.inj.snapshot()
	if set == nil {
		return
	}
	for _, c := range set.creds {
		if hostMatches(c.Hosts, ic.name) {
			ic.inj.notice(Notice{Secret: c.Name, Host: ic.name, Kind: NoticeUpstreamUnverified,
				Message: fmt.Sprintf("the certificate of %s (%s) did not verify, so secret %s was not sent and the connection failed: %v", ic.name, ic.dst, c.Name, cv.Err)})
		}
	}
}

// serveHTTP1 serves HTTP/1.x on c until the guest closes it, it idles,
// or it is upgraded and the upgraded stream ends.
func (ic *interception) serveHTTP1(c net.Conn) {
	ln := &oneConnListener{c: c, done: make(chan struct{})}
	srv := &http.Server{
		Handler:           ic,
		ReadHeaderTimeout: sniffTimeout,
		IdleTimeout:       proxyIdleTimeout,
		ErrorLog:          discardLog,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				ln.Close()
			}
		},
	}
	_ = srv.Serve(ln)
	ic.handlers.Wait()
}

// dial returns the upstream connection made already, the first time, and
// later new ones to the same address (through the policy, as flows of
// the sandbox), verified as the bound name.
func (ic *interception) dial(ctx context.Context) (net.Conn, error) {
	ic.mu.Lock()
	c := ic.first
	ic.first = nil
	ic.mu.Unlock()
	if c != nil {
		return c, nil
	}
	l := ic.l
	if !l.reserve("tcp", ic.dst) {
		return nil, fmt.Errorf("egress to %s: the sandbox's connection limit", ic.dst)
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	raw, err := l.dialer().DialContext(ctx, "tcp", ic.dst.String())
	if err != nil {
		l.release()
		return nil, err
	}
	if !l.track(raw) {
		raw.Close()
		l.release()
		return nil, net.ErrClosed
	}
	fc := &flowConn{Conn: raw, l: l}
	if !ic.tls {
		return fc, nil
	}
	tc := tls.Client(fc, ic.upstreamTLS())
	if err := tc.HandshakeContext(ctx); err != nil {
		fc.Close()
		ic.upstreamFailed(err)
		return nil, err
	}
	return tc, nil
}

// flowConn is a tracked connection that holds one of the sandbox's flows
// until it is closed.
type flowConn struct {
	net.Conn
	l    *Link
	once sync.Once
}

func (c *flowConn) Close() error {
	c.once.Do(func() {
		c.l.untrack(c.Conn)
		c.l.release()
	})
	return nil
}

// ServeHTTP forwards one guest request.
func (ic *interception) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ic.handlers.Add(1)
	defer ic.handlers.Done()
	host := canonicalHost(r.Host)
	if host == "" {
		host = ic.name
	}
	out := r.Clone(r.Context())
	out.Header.Del("Accept-Encoding")
	if set := ic.inj.snapshot(); set != nil {
		hrep, brep := set.requestRules(ic.inj, host, ic.name, ic.tls)
		substituteHeaders(out.Header, hrep)
		if !brep.empty() && r.Body != nil && r.Body != http.NoBody {
			if brep.sameLen || r.ContentLength < 0 {
				out.Body = readCloser{newReplaceReader(brep, r.Body), r.Body}
			} else {
				body, err := io.ReadAll(io.LimitReader(r.Body, maxBufferedBody+1))
				if err != nil {
					http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
					return
				}
				if len(body) > maxBufferedBody {
					http.Error(w, fmt.Sprintf("Helmr egress: a request body whose credential substitution changes its length is buffered, up to %d bytes; this one is larger (send it chunked, without Content-Length)", maxBufferedBody),
						http.StatusRequestEntityTooLarge)
					return
				}
				body = []byte(brep.replaceString(string(body)))
				out.Body = io.NopCloser(bytes.NewReader(body))
				out.ContentLength = int64(len(body))
				out.Header.Set("Content-Length", strconv.Itoa(len(body)))
			}
		}
	}
	ic.rp.ServeHTTP(w, out)
}

type readCloser struct {
	io.Reader
	io.Closer
}

// rewrite points the request at the upstream, keeping the guest's
// forwarding headers (ReverseProxy drops them).
func (ic *interception) rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = "http"
	if ic.tls {
		pr.Out.URL.Scheme = "https"
	}
	host := pr.In.Host
	if host == "" {
		host = ic.name
	}
	pr.Out.URL.Host, pr.Out.Host = host, host
	for _, k := range []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		if v, ok := pr.In.Header[k]; ok {
			pr.Out.Header[k] = v
		}
	}
}

// modifyResponse scrubs values out of the response's headers and body,
// decoding gzip so that the body can be scanned.
func (ic *interception) modifyResponse(resp *http.Response) error {
	set := ic.inj.set.Load()
	scrubHeaders(resp.Header, set.scrub)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return nil // an upgraded stream passes through
	}
	hasBody := resp.Request.Method != http.MethodHead && resp.StatusCode != http.StatusNoContent &&
		resp.StatusCode != http.StatusNotModified && resp.ContentLength != 0
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
	case "gzip", "x-gzip":
		if hasBody {
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				return fmt.Errorf("gzip response: %w", err)
			}
			resp.Body = readCloser{zr, resp.Body}
		}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	default:
		return errEncoding
	}
	if hasBody && !set.scrub.empty() {
		resp.Body = readCloser{newReplaceReader(set.scrub, resp.Body), resp.Body}
		if !set.scrub.sameLen {
			resp.Header.Del("Content-Length")
			resp.ContentLength = -1
		}
	}
	return nil
}

func (ic *interception) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	ic.l.cfg.Logger.Debug("egress interception: request failed", "sandbox", ic.l.id, "host", ic.name, "err", err)
	msg := "Helmr egress: the upstream request failed"
	if errors.Is(err, errEncoding) {
		msg = "Helmr egress: " + errEncoding.Error() + " (the request asked for none)"
	}
	http.Error(w, msg, http.StatusBadGateway)
}

// oneConnListener hands an http.Server one connection, then blocks until
// it is closed.
type oneConnListener struct {
	c     net.Conn
	taken atomic.Bool
	done  chan struct{}
	once  sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if l.taken.CompareAndSwap(false, true) {
		return l.c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

// bufferPool is ReverseProxy's copy buffers: large, reused.
type bufferPool struct{ p sync.Pool }

const proxyBufSize = 256 << 10

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, proxyBufSize)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
