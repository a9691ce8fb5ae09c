package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"time"

	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/sandbox/network/nettest"
)

// The HTTPS host answers to two names: one bound to a credential
// (intercepted), one not (passed through).
const (
	boundName = "bound.bench.test"
	plainName = "plain.bench.test"
	token     = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
)

// benchHTTPS compares, from the sandbox behind cfg's link, HTTPS
// downloads and time to first byte through pass-through and intercepted
// connections to the same host.
func benchHTTPS(t *tb, h *nettest.Host, testCA *nettest.TLS, cfg *network.Config, netns string, size int64, n int) error {
	// Incompressible-looking bytes, so the response scanner sees data
	// like a real download's.
	chunk := make([]byte, 256<<10)
	x := uint64(88172645463325252)
	for i := range chunk {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		chunk[i] = byte(x)
	}
	port := h.ServeHTTPS(t, h.Addr, testCA.Cert(t, boundName, plainName), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" && r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/bulk" {
			_, _ = io.WriteString(w, "hi")
			return
		}
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		for left := size; left > 0; {
			k, err := w.Write(chunk[:min(int64(len(chunk)), left)])
			if err != nil {
				return
			}
			left -= int64(k)
		}
	}))
	ca, err := network.NewCA("bench")
	if err != nil {
		return err
	}
	ph, err := network.NewPlaceholder(token)
	if err != nil {
		return err
	}
	cfg.Injector("bench", ca).Add(network.Credential{Name: "TOKEN", Placeholder: ph, Value: token, Hosts: []string{boundName}})
	pool := testCA.Pool.Clone()
	pool.AppendCertsFromPEM(ca.CertPEM())
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			_, p, _ := net.SplitHostPort(addr)
			return nettest.Dial(ctx, netns, "tcp", net.JoinHostPort(h.Addr.String(), p))
		},
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true, DisableKeepAlives: true, DisableCompression: true,
	}}
	url := func(name, path string) string { return "https://" + name + ":" + strconv.Itoa(port) + path }
	get := func(name, path string) (*http.Response, error) {
		req, _ := http.NewRequest("GET", url(name, path), nil)
		req.Header.Set("Authorization", "Bearer "+ph)
		if name == plainName {
			req.Header.Set("Authorization", "Bearer "+token) // pass-through: the sandbox sends it itself
		}
		return client.Do(req)
	}
	download := func(name string) (float64, error) {
		start := time.Now()
		resp, err := get(name, "/bulk")
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		got, err := io.Copy(io.Discard, resp.Body)
		if err != nil || got != size || resp.StatusCode != 200 {
			return 0, fmt.Errorf("https %s: %s, %d of %d bytes: %v", name, resp.Status, got, size, err)
		}
		return float64(size) / (1 << 20) / time.Since(start).Seconds(), nil
	}
	firstByte := func(name string) (time.Duration, error) {
		var ds []time.Duration
		for range n {
			start := time.Now()
			var first time.Duration
			req, _ := http.NewRequest("GET", url(name, "/small"), nil)
			req.Header.Set("Authorization", "Bearer "+map[string]string{boundName: ph, plainName: token}[name])
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				GotFirstResponseByte: func() { first = time.Since(start) }}))
			resp, err := client.Do(req)
			if err != nil {
				return 0, err
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(b) != "hi" {
				return 0, fmt.Errorf("https %s: %s %q: %v", name, resp.Status, b, err)
			}
			ds = append(ds, first)
		}
		slices.Sort(ds)
		return ds[len(ds)/2], nil
	}
	fmt.Printf("sandbox HTTPS: %d MiB download and %d requests on new connections, pass-through vs intercepted (credential substituted)\n", size>>20, n)
	pass, err := download(plainName)
	if err != nil {
		return err
	}
	icpt, err := download(boundName)
	if err != nil {
		return err
	}
	fmt.Printf("  download   pass-through %8.1f MiB/s   intercepted %8.1f MiB/s   ratio intercepted/pass-through %.2f (target >= 0.5)\n", pass, icpt, icpt/pass)
	pf, err := firstByte(plainName)
	if err != nil {
		return err
	}
	inf, err := firstByte(boundName)
	if err != nil {
		return err
	}
	fmt.Printf("  first byte pass-through %8.3f ms      intercepted %8.3f ms      added %.3f ms (medians, dial to first response byte; target < 5 ms)\n",
		ms(pf), ms(inf), ms(inf-pf))
	return nil
}
