package network_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/redact"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/sandbox/network/nettest"
	"github.com/helmr/helmr/internal/testenv"
)

// injectEnv is a sandbox with an injector and HTTPS test hosts that echo
// what they receive.
type injectEnv struct {
	h     *nettest.Host
	s     *sandboxNet
	inj   *network.Injector
	tlsCA *nettest.TLS
	names map[string]netip.Addr // the sandbox's "/etc/hosts"
	rec   *recorder
	port  int // the echo host's HTTPS port on h.Addr
}

func newInjectEnv(t *testing.T, policy string, set func(*network.Config)) *injectEnv {
	t.Helper()
	testenv.RequireRoot(t)
	e := &injectEnv{h: nettest.NewHost(t), tlsCA: nettest.NewTLS(t), rec: &recorder{}}
	e.names = map[string]netip.Addr{"api.bound.test": e.h.Addr, "other.test": e.h.Addr2}
	e.h.ServeDNS(t, e.h.Addr, map[string]netip.Addr{"api.bound.test": e.h.Addr, "other.bound.test": e.h.Addr2})
	cert := e.tlsCA.Cert(t, "api.bound.test", "other.bound.test", "other.test", "evil.test")
	e.port = e.h.ServeHTTPS(t, e.h.Addr, cert, e.rec.handler())
	e.s = newSandboxNetWith(t, policy, netip.AddrPortFrom(e.h.Addr, 53), func(c *network.Config) {
		c.UpstreamRoots = e.tlsCA.Pool
		set(c)
	})
	ca, err := network.NewCA("sbx-test")
	if err != nil {
		t.Fatal(err)
	}
	e.inj = e.s.cfg.Injector("sbx-test", ca)
	return e
}

// client is an HTTP client in the sandbox that trusts the sandbox's CA
// (and the test CA, for hosts not intercepted).
func (e *injectEnv) client(h2 bool) *http.Client {
	pool := e.tlsCA.Pool.Clone()
	pool.AppendCertsFromPEM(e.inj.CA().CertPEM())
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, port, _ := net.SplitHostPort(addr)
			if a, ok := e.names[host]; ok {
				addr = net.JoinHostPort(a.String(), port)
			}
			return nettest.Dial(ctx, e.s.path, "tcp", addr)
		},
		TLSClientConfig:    &tls.Config{RootCAs: pool},
		DisableCompression: true,
		ForceAttemptHTTP2:  h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func (e *injectEnv) url(path string) string {
	return "https://api.bound.test:" + strconv.Itoa(e.port) + path
}

func (e *injectEnv) notices() []network.Notice {
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	return append([]network.Notice(nil), e.s.notices...)
}

// credential makes a credential for value bound to hosts.
func credential(t *testing.T, name, value string, body bool, hosts ...string) network.Credential {
	t.Helper()
	ph, err := network.NewPlaceholder(value)
	if err != nil {
		t.Fatal(err)
	}
	return network.Credential{Name: name, Placeholder: ph, Value: value, Hosts: hosts, Body: body}
}

type recorded struct {
	Proto  string
	Header http.Header
	Body   string
	Remote string
	Length int64
}

// recorder is a test host's handler: it records each request and echoes
// its headers and body back, plainly, as JSON, base64 and hex; /gzip
// answers gzip-compressed unasked; /stream sends a line and holds the
// response open until the client goes.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

func (rc *recorder) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, recorded{Proto: r.Proto, Header: r.Header.Clone(), Body: string(body), Remote: r.RemoteAddr, Length: r.ContentLength})
		rc.mu.Unlock()
		if r.URL.Path == "/stream" {
			w.Write([]byte("first\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		var all strings.Builder
		for k, vs := range r.Header {
			all.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
		all.Write(body)
		j, _ := json.Marshal(map[string]any{"headers": r.Header, "body": string(body)})
		out := fmt.Sprintf("%s\n%s\nb64:%s\nb64url:%s\nhex:%s\n", all.String(), j,
			base64.StdEncoding.EncodeToString([]byte(all.String())), base64.URLEncoding.EncodeToString([]byte("x"+all.String())),
			hex.EncodeToString([]byte(all.String())))
		w.Header().Set("X-Echo-Authorization", r.Header.Get("Authorization"))
		if r.URL.Path == "/gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			zw.Write([]byte(out))
			zw.Close()
			return
		}
		w.Write([]byte(out))
	})
}

func (rc *recorder) all() []recorded {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]recorded(nil), rc.reqs...)
}

func (rc *recorder) last(t *testing.T) recorded {
	t.Helper()
	all := rc.all()
	if len(all) == 0 {
		t.Fatal("the test host received no request")
	}
	return all[len(all)-1]
}

// do sends req and returns the response's headers and body as text.
func do(t *testing.T, c *http.Client, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: body: %v", req.Method, req.URL, err)
	}
	var hs strings.Builder
	for k, vs := range resp.Header {
		hs.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
	}
	return resp, hs.String() + "\n" + string(b)
}

// decodedEcho decodes the base64 and hex lines of a recorder's echo.
func decodedEcho(text string) string {
	var out strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, "b64:"); ok {
			b, _ := base64.StdEncoding.DecodeString(v)
			out.Write(b)
		}
		if v, ok := strings.CutPrefix(line, "hex:"); ok {
			b, _ := hex.DecodeString(v)
			out.Write(b)
		}
	}
	return out.String()
}

// noValue fails if text holds value in any form redaction knows.
func noValue(t *testing.T, what, text, value string) {
	t.Helper()
	for _, f := range redact.Forms(value) {
		if strings.Contains(text, f) {
			t.Errorf("%s holds the value (form %q):\n%s", what, f, text)
		}
	}
}

const ghValue = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"

func TestInjectBearer(t *testing.T) {
	e := newInjectEnv(t, "open", func(*network.Config) {})
	cred := credential(t, "GITHUB_TOKEN", ghValue, false, "*.bound.test")
	e.inj.Add(cred)
	c := e.client(false)

	var reused []bool
	for i, path := range []string{"/echo", "/gzip", "/echo"} {
		req, _ := http.NewRequest("GET", e.url(path), nil)
		req.Header.Set("Authorization", "Bearer "+cred.Placeholder)
		req.Header.Set("X-Token-Copy", "a "+cred.Placeholder+" b")
		req.Header.Set("Accept-Encoding", "br")
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) { reused = append(reused, ci.Reused) }}))
		resp, text := do(t, c, req)
		got := e.rec.last(t)
		if a := got.Header.Get("Authorization"); a != "Bearer "+ghValue {
			t.Errorf("request %d: the host got Authorization %q, want the value", i, a)
		}
		if a := got.Header.Get("X-Token-Copy"); a != "a "+ghValue+" b" {
			t.Errorf("request %d: the host got X-Token-Copy %q, want the value inside", i, a)
		}
		if ae := got.Header.Get("Accept-Encoding"); ae != "" {
			t.Errorf("request %d: the host got Accept-Encoding %q, want none", i, ae)
		}
		if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("request %d: status %d, Content-Encoding %q; want 200, identity", i, resp.StatusCode, resp.Header.Get("Content-Encoding"))
		}
		noValue(t, fmt.Sprintf("response %d", i), text, ghValue)
		// The value's echoes turned back into the placeholder's.
		if !strings.Contains(text, "X-Echo-Authorization: Bearer "+cred.Placeholder) || !strings.Contains(decodedEcho(text), cred.Placeholder) {
			t.Errorf("response %d lacks the placeholder in its echoes:\n%s", i, text)
		}
	}
	// HTTP/1.1 keep-alive: one connection from the sandbox, one upstream.
	if len(reused) != 3 || reused[0] || !reused[1] || !reused[2] {
		t.Errorf("sandbox connections reused = %v, want [false true true]", reused)
	}
	remotes := map[string]bool{}
	for _, r := range e.rec.all() {
		remotes[r.Remote] = true
		if r.Proto != "HTTP/2.0" {
			t.Errorf("upstream protocol %s, want HTTP/2.0 (negotiated by ALPN)", r.Proto)
		}
	}
	if len(remotes) != 1 {
		t.Errorf("the host saw connections from %v, want one", remotes)
	}
	if n := e.notices(); len(n) != 0 {
		t.Errorf("notices = %+v, want none", n)
	}
}

func TestInjectHTTP2(t *testing.T) {
	e := newInjectEnv(t, "open", func(*network.Config) {})
	cred := credential(t, "API_KEY", "sk-proj-Zq81NcRt0aBcDeFgHiJkLmNo", false, "api.bound.test")
	e.inj.Add(cred)
	req, _ := http.NewRequest("GET", e.url("/echo"), nil)
	req.Header.Set("Authorization", "Bearer "+cred.Placeholder)
	resp, text := do(t, e.client(true), req)
	if resp.ProtoMajor != 2 {
		t.Errorf("the sandbox's client spoke %s, want HTTP/2", resp.Proto)
	}
	if a := e.rec.last(t).Header.Get("Authorization"); a != "Bearer "+cred.Value {
		t.Errorf("the host got Authorization %q, want the value", a)
	}
	noValue(t, "response", text, cred.Value)
}

func TestInjectBasicAuthAndBody(t *testing.T) {
	e := newInjectEnv(t, "open", func(*network.Config) {})
	git := credential(t, "GIT_TOKEN", ghValue, false, "api.bound.test")
	short := credential(t, "SHORT", "s3cr3t-9", true, "api.bound.test") // its placeholder is longer
	e.inj.Add(git, short)
	c := e.client(false)

	req, _ := http.NewRequest("GET", e.url("/echo"), nil)
	req.SetBasicAuth("x-access-token", git.Placeholder)
	_, text := do(t, c, req)
	got := e.rec.last(t)
	if want := "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+ghValue)); got.Header.Get("Authorization") != want {
		t.Errorf("the host got Authorization %q, want %q", got.Header.Get("Authorization"), want)
	}
	noValue(t, "Basic auth response", text, ghValue)

	body := "a=" + short.Placeholder + "&b=" + git.Placeholder + "&c=" + short.Placeholder
	want := "a=" + short.Value + "&b=" + git.Placeholder + "&c=" + short.Value
	for _, chunked := range []bool{false, true} {
		var rd io.Reader = strings.NewReader(body)
		if chunked {
			rd = io.MultiReader(strings.NewReader(body[:5]), strings.NewReader(body[5:]))
		}
		req, _ := http.NewRequest("POST", e.url("/echo"), rd)
		if chunked {
			req.ContentLength = -1
		}
		_, text := do(t, c, req)
		got := e.rec.last(t)
		if got.Body != want {
			t.Errorf("chunked=%v: the host got body %q, want %q (only the Body credential substituted)", chunked, got.Body, want)
		}
		if !chunked && got.Length != int64(len(want)) {
			t.Errorf("the host got Content-Length %d, want %d", got.Length, len(want))
		}
		noValue(t, "body response", text, short.Value)
	}
}

func TestInjectUnboundHost(t *testing.T) {
	e := newInjectEnv(t, "open", func(*network.Config) {})
	bound := credential(t, "BOUND", ghValue, false, "api.bound.test")
	other := credential(t, "OTHER", "xoxb-2222-3333-abcdEFGHijkl", true, "elsewhere.test")
	remove := e.inj.Add(bound, other)
	c := e.client(false)
	for range 2 {
		req, _ := http.NewRequest("GET", e.url("/echo"), nil)
		req.Header.Set("Authorization", "Bearer "+bound.Placeholder)
		req.Header.Set("X-Other", other.Placeholder)
		do(t, c, req)
		got := e.rec.last(t)
		if x := got.Header.Get("X-Other"); x != other.Placeholder {
			t.Errorf("the host got X-Other %q, want the placeholder as sent", x)
		}
		if a := got.Header.Get("Authorization"); a != "Bearer "+ghValue {
			t.Errorf("the host got Authorization %q, want the bound value", a)
		}
	}
	want := []network.Notice{{Secret: "OTHER", Host: "api.bound.test", Kind: network.NoticeUnboundHost}}
	got := e.notices()
	if len(got) != 1 || got[0].Secret != want[0].Secret || got[0].Host != want[0].Host || got[0].Kind != want[0].Kind {
		t.Fatalf("notices = %+v, want one like %+v", got, want)
	}
	if strings.Contains(got[0].Message, other.Value) || strings.Contains(got[0].Message, other.Placeholder) {
		t.Errorf("notice message %q holds a value or a placeholder", got[0].Message)
	}
	// Plain HTTP to a host bound to nothing is passed through; its first
	// request head is still read for placeholders.
	plain := e.h.ServeHTTP(t, e.h.Addr2, e.rec.handler())
	req, _ := http.NewRequest("GET", "http://other.test:"+strconv.Itoa(plain)+"/echo", nil)
	req.Header.Set("X-Token", bound.Placeholder)
	do(t, c, req)
	if x := e.rec.last(t).Header.Get("X-Token"); x != bound.Placeholder {
		t.Errorf("plain HTTP to an unbound host: the host got %q, want the placeholder", x)
	}
	if got := e.notices(); len(got) != 2 || got[1].Secret != "BOUND" || got[1].Host != "other.test" || got[1].Kind != network.NoticeUnboundHost {
		t.Errorf("notices = %+v, want a second one for BOUND sent to other.test", got)
	}
	// Removed credentials are no longer substituted.
	remove()
	req, _ = http.NewRequest("GET", e.url("/echo"), nil)
	req.Header.Set("Authorization", "Bearer "+bound.Placeholder)
	do(t, c, req)
	if a := e.rec.last(t).Header.Get("Authorization"); a != "Bearer "+bound.Placeholder {
		t.Errorf("after remove the host got Authorization %q, want the placeholder", a)
	}
}

func TestInjectPlainHTTP(t *testing.T) {
	e := newInjectEnv(t, "open", func(*network.Config) {})
	port := e.h.ServeHTTP(t, e.h.Addr, e.rec.handler())
	cred := credential(t, "GITHUB_TOKEN", ghValue, true, "api.bound.test")
	e.inj.Add(cred)
	req, _ := http.NewRequest("POST", "http://api.bound.test:"+strconv.Itoa(port)+"/echo", strings.NewReader(cred.Placeholder))
	req.Header.Set("Authorization", "Bearer "+cred.Placeholder)
	do(t, e.client(false), req)
	got := e.rec.last(t)
	if got.Header.Get("Authorization") != "Bearer "+cred.Placeholder || got.Body != cred.Placeholder {
		t.Errorf("plain HTTP: the host got %q and body %q, want the placeholder in both", got.Header.Get("Authorization"), got.Body)
	}
	n := e.notices()
	if len(n) != 1 || n[0].Kind != network.NoticePlainHTTP || n[0].Secret != "GITHUB_TOKEN" {
		t.Errorf("notices = %+v, want one plain-http notice for GITHUB_TOKEN", n)
	}
}

func TestInjectPassThroughUnbound(t *testing.T) {
	e := newInjectEnv(t, "open", func(*network.Config) {})
	e.inj.Add(credential(t, "GITHUB_TOKEN", ghValue, false, "api.bound.test"))
	cert := e.tlsCA.Cert(t, "plain.test")
	port := e.h.ServeHTTPS(t, e.h.Addr2, cert, e.rec.handler())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := nettest.Dial(ctx, e.s.path, "tcp", hostPort(e.h.Addr2, port))
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(raw, &tls.Config{ServerName: "plain.test", RootCAs: e.tlsCA.Pool})
	defer tc.Close()
	if err := tc.HandshakeContext(ctx); err != nil {
		t.Fatalf("handshake with an unbound host: %v", err)
	}
	if peer := tc.ConnectionState().PeerCertificates[0]; !bytes.Equal(peer.Raw, cert.Leaf.Raw) {
		t.Errorf("the sandbox saw certificate %q, want the host's own", peer.Subject)
	}
}

func TestInjectUntrustedUpstream(t *testing.T) {
	e := newInjectEnv(t, "open", func(c *network.Config) { c.UpstreamRoots = x509.NewCertPool() })
	cred := credential(t, "GITHUB_TOKEN", ghValue, false, "api.bound.test")
	e.inj.Add(cred)
	req, _ := http.NewRequest("GET", e.url("/echo"), nil)
	req.Header.Set("Authorization", "Bearer "+cred.Placeholder)
	if resp, err := e.client(false).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("request through an unverified upstream: %s, want the connection to fail", resp.Status)
	}
	if n := len(e.rec.all()); n != 0 {
		t.Errorf("the host got %d requests, want none", n)
	}
	n := e.notices()
	if len(n) != 1 || n[0].Kind != network.NoticeUpstreamUnverified || n[0].Host != "api.bound.test" {
		t.Errorf("notices = %+v, want one upstream-unverified for api.bound.test", n)
	}
}

func TestInjectServerSpeaksFirst(t *testing.T) {
	e := newInjectEnv(t, "open", func(*network.Config) {})
	e.inj.Add(credential(t, "GITHUB_TOKEN", ghValue, false, "api.bound.test"))
	port := e.h.Serve(t, e.h.Addr, 0, "SSH-2.0-banner\r\n")
	if got, err := e.s.get(hostPort(e.h.Addr, port)); err != nil || got != "SSH-2.0-banner\r\n" {
		t.Errorf("banner server with an injector: %q, %v", got, err)
	}
}

// tlsDial connects from the sandbox to addr with server name sni and
// completes a handshake trusting the test CA.
func tlsDial(e *injectEnv, addr, sni string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := nettest.Dial(ctx, e.s.path, "tcp", addr)
	if err != nil {
		return err
	}
	tc := tls.Client(raw, &tls.Config{ServerName: sni, RootCAs: e.tlsCA.Pool})
	defer tc.Close()
	return tc.HandshakeContext(ctx)
}

func TestAllowlistSNI(t *testing.T) {
	e := newInjectEnv(t, "allow:*.bound.test", func(*network.Config) {})
	if _, err := e.s.lookup("api.bound.test"); err != nil {
		t.Fatal(err)
	}
	addr := hostPort(e.h.Addr, e.port)
	if err := tlsDial(e, addr, "evil.test"); err == nil {
		t.Error("SNI evil.test to an address allowed by name: handshake succeeded, want refused")
	}
	if rep := strings.Join(e.s.reported(), "\n"); !strings.Contains(rep, "tcp connection to "+addr+" denied: its TLS server name evil.test is not in the egress allowlist") {
		t.Errorf("denials = %q, want one naming evil.test", rep)
	}
	if err := tlsDial(e, addr, "api.bound.test"); err != nil {
		t.Errorf("SNI api.bound.test: %v", err)
	}
}

func TestAllowlistNameResolvedElsewhere(t *testing.T) {
	e := newInjectEnv(t, "allow:*.bound.test", func(*network.Config) {})
	httpPort := e.h.ServeHTTP(t, e.h.Addr, e.rec.handler())
	addr := hostPort(e.h.Addr, e.port)
	// No lookup through the sandbox: the names are known elsewhere.
	if err := tlsDial(e, addr, "other.bound.test"); err == nil {
		t.Error("SNI other.bound.test (resolving to another address): handshake succeeded, want refused")
	}
	if err := tlsDial(e, hostPort(e.h.Addr2, e.port), "api.bound.test"); err == nil {
		t.Error("SNI api.bound.test to an address it does not resolve to: handshake succeeded, want refused")
	}
	rep := strings.Join(e.s.reported(), "\n")
	for _, want := range []string{
		"tcp connection to " + addr + " denied: not in the egress allowlist, and its TLS server name other.bound.test does not resolve to it",
		"tcp connection to " + hostPort(e.h.Addr2, e.port) + " denied: not in the egress allowlist, and its TLS server name api.bound.test does not resolve to it",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("denials:\n%s\nwant a line containing %q", rep, want)
		}
	}
	req, _ := http.NewRequest("GET", "http://api.bound.test:"+strconv.Itoa(httpPort)+"/echo", nil)
	if resp, _ := do(t, e.client(false), req); resp.StatusCode != 200 {
		t.Errorf("HTTP Host api.bound.test: %s", resp.Status)
	}
	if err := tlsDial(e, addr, "api.bound.test"); err != nil {
		t.Errorf("SNI api.bound.test to its address: %v", err)
	}
}

func TestCloseEndsInterception(t *testing.T) {
	e := newInjectEnv(t, "open", func(*network.Config) {})
	cred := credential(t, "GITHUB_TOKEN", ghValue, false, "api.bound.test")
	e.inj.Add(cred)
	var bodies []io.ReadCloser
	for _, h2 := range []bool{false, true} {
		req, _ := http.NewRequest("GET", e.url("/stream"), nil)
		resp, err := e.client(h2).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		line := make([]byte, 6)
		if _, err := io.ReadFull(resp.Body, line); err != nil || string(line) != "first\n" {
			t.Fatalf("stream: %q, %v", line, err)
		}
		bodies = append(bodies, resp.Body)
	}
	if err := e.s.link.Close(); err != nil {
		t.Fatal(err)
	}
	for i, b := range bodies {
		done := make(chan error, 1)
		go func() { _, err := io.ReadAll(b); done <- err }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Fatalf("stream %d: still open 15s after Close", i)
		}
		b.Close()
	}
	// Every goroutine of the interceptions ends.
	deadline := time.Now().Add(15 * time.Second)
	for {
		left := interceptionGoroutines()
		if left == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines left after Close:\n%s", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// interceptionGoroutines returns the stacks of goroutines running, or
// started by, the link's TCP forwarding.
func interceptionGoroutines() string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "sandbox/network.(*interception)") || strings.Contains(g, "sandbox/network.(*Link).sniffAndForward") ||
			strings.Contains(g, "sandbox/network.sniff") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
