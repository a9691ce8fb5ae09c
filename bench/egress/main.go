// Command egress measures what a sandbox's network costs: bulk download
// throughput and connection setup (connect to first byte) from a test host
// in a network namespace this program creates, through a sandbox's
// interface and the worker's user-space stack, against the same transfers
// made directly from the host's namespace in the same run; then, over
// HTTPS from the sandbox, the same sandbox's pass-through connections
// against intercepted ones (a credential bound to the host's name, so
// the worker terminates TLS and substitutes it). Run as root:
// go run ./bench/egress [-mib 512] [-n 200]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/sandbox/network/nettest"
)

// tb runs the nettest helpers outside a test: failures end the program,
// cleanups run at exit.
type tb struct{ cleanups []func() }

func (*tb) Helper() {}
func (t *tb) Fatal(args ...any) {
	t.done()
	fmt.Fprintln(os.Stderr, append([]any{"egress:"}, args...)...)
	os.Exit(1)
}
func (t *tb) Fatalf(f string, args ...any) { t.Fatal(fmt.Sprintf(f, args...)) }
func (t *tb) Cleanup(f func())             { t.cleanups = append(t.cleanups, f) }
func (t *tb) done() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}

func main() {
	mibs := flag.Int64("mib", 512, "MiB per bulk transfer")
	n := flag.Int("n", 200, "connections timed for setup")
	flag.Parse()
	t := &tb{}
	defer t.done()
	h := nettest.NewHost(t)
	size := *mibs << 20
	bulk := h.ServeBulk(t, h.Addr, size)
	greet := h.Serve(t, h.Addr, 0, "hi")
	dir, err := os.MkdirTemp("", "helmr-egress-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	testCA := nettest.NewTLS(t)
	cfg := &network.Config{Policy: network.Policy{Mode: network.Open},
		Upstream: []netip.AddrPort{netip.AddrPortFrom(h.Addr, 53)}, UpstreamRoots: testCA.Pool}
	link, err := network.Create(filepath.Join(dir, "netns"), "bench", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	host := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	sandbox := func(ctx context.Context, addr string) (net.Conn, error) {
		return nettest.Dial(ctx, filepath.Join(dir, "netns"), "tcp", addr)
	}
	addr := func(port int) string { return net.JoinHostPort(h.Addr.String(), strconv.Itoa(port)) }

	fmt.Printf("sandbox egress: %d MiB download and %d connections from a test host, via the sandbox's interface vs directly from the host\n", *mibs, *n)
	base, err := throughput(host, addr(bulk), size)
	if err != nil {
		t.Fatal(err)
	}
	helmr, err := throughput(sandbox, addr(bulk), size)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("  download   host %8.1f MiB/s   sandbox %8.1f MiB/s   ratio sandbox/host %.2f\n", base, helmr, helmr/base)
	bc, err := setup(host, addr(greet), *n)
	if err != nil {
		t.Fatal(err)
	}
	hc, err := setup(sandbox, addr(greet), *n)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("  connect    host %8.3f ms      sandbox %8.3f ms      ratio sandbox/host %.2f (medians, connect to first byte)\n",
		ms(bc), ms(hc), float64(hc)/float64(bc))
	if err := benchHTTPS(t, h, testCA, cfg, filepath.Join(dir, "netns"), size, *n); err != nil {
		t.Fatal(err)
	}
}

type dialFunc func(ctx context.Context, addr string) (net.Conn, error)

// throughput downloads size bytes once and returns MiB/s.
func throughput(dial dialFunc, addr string, size int64) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := dial(ctx, addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	got, err := io.Copy(io.Discard, c)
	if err != nil || got != size {
		return 0, fmt.Errorf("downloaded %d of %d bytes: %v", got, size, err)
	}
	return float64(size) / (1 << 20) / time.Since(start).Seconds(), nil
}

// setup returns the median time from dialling to the server's first byte.
func setup(dial dialFunc, addr string, n int) (time.Duration, error) {
	var ds []time.Duration
	buf := make([]byte, 2)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		c, err := dial(ctx, addr)
		if err == nil {
			_, err = io.ReadFull(c, buf)
			c.Close()
		}
		cancel()
		if err != nil {
			return 0, err
		}
		ds = append(ds, time.Since(start))
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
