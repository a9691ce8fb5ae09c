package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/sandbox/network/nettest"
)

// TestEgress runs a task under an allowlist on helmr dev: the listed
// network and the addresses of listed names are reachable, everything else
// is refused by the worker (unlisted test host, unlisted name, the host's
// own ports whatever address they listen on, the control plane's port via
// the gateway, the metadata address), and the run's events name each
// denial. All traffic stays on this machine: the test hosts live in a
// network namespace the test creates.
func TestEgress(t *testing.T) { forEachTier(t, testEgress) }

func testEgress(t *testing.T, tier string) {
	h := nettest.NewHost(t)
	port := h.Serve(t, h.Addr, 0, "listed network")
	port2 := h.Serve(t, h.Addr2, 0, "listed name")
	dns := h.ServeDNS(t, h.Addr, map[string]netip.Addr{"api.allowed.test": h.Addr2, "other.test": h.Addr2})
	// A listener on every address of the host: a control plane or worker
	// port bound to 0.0.0.0.
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	hostPort := ln.Addr().(*net.TCPAddr).Port
	d := startDev(t, tier,
		"HELMR_EGRESS=allow:"+h.Addr.String()+"/32,*.allowed.test",
		"HELMR_DNS_UPSTREAM="+dns.Addr.String())
	u, _ := url.Parse(d.url)
	cpPort, _ := strconv.Atoi(u.Port())
	d.deploy("internal/e2e/testdata/egress")

	type target struct {
		Host string `json:"host"`
		Port int    `json:"port"`
	}
	connects := []target{
		{h.Addr.String(), port},            // listed network
		{h.Addr2.String(), port2},          // not listed (yet)
		{"name:api.allowed.test", port2},   // listed name
		{h.Local.String(), hostPort},       // the host's own address
		{network.Gateway.String(), cpPort}, // the control plane via the gateway
		{"127.0.0.1", cpPort},              // the sandbox's own loopback
		{"169.254.169.254", 80},            // metadata
	}
	payload, _ := json.Marshal(map[string]any{"lookups": []string{"api.allowed.test", "other.test"}, "connects": connects})
	r := d.waitDone(d.trigger("egress", "egress", string(payload)).ID, 2*time.Minute)
	if r.Status != runs.StatusCompleted {
		t.Fatalf("egress run = %s %+v", r.Status, r.Error)
	}
	var got struct {
		Lookups  map[string]string
		Connects map[string]string
	}
	if err := json.Unmarshal(r.Output, &got); err != nil {
		t.Fatal(err)
	}
	key := func(host string, port int) string { return host + ":" + strconv.Itoa(port) }
	want := map[string]string{
		key(h.Addr.String(), port):            "listed network",
		key(h.Addr2.String(), port2):          "ECONNRESET", // accepted to read a name it may send, then reset
		key("name:api.allowed.test", port2):   "listed name",
		key(h.Local.String(), hostPort):       "ECONNREFUSED",
		key(network.Gateway.String(), cpPort): "ECONNREFUSED",
		key("127.0.0.1", cpPort):              "ECONNREFUSED",
		key("169.254.169.254", 80):            "ECONNREFUSED",
	}
	for k, w := range want {
		if got.Connects[k] != w {
			t.Errorf("connect %s = %q, want %q", k, got.Connects[k], w)
		}
	}
	if got.Lookups["api.allowed.test"] != h.Addr2.String() || got.Lookups["other.test"] == h.Addr2.String() {
		t.Errorf("lookups = %v, want api.allowed.test resolved and other.test refused", got.Lookups)
	}
	var notes []string
	for _, ev := range d.events(r.ID) {
		var s runs.SystemData
		if ev.Type == runs.EventSystem && json.Unmarshal(ev.Data, &s) == nil && s.Attrs["egress"] == "denied" {
			notes = append(notes, s.Message)
		}
	}
	all := strings.Join(notes, "\n")
	for _, w := range []string{
		fmt.Sprintf("egress policy: tcp connection to %s denied: not in the egress allowlist", key(h.Addr2.String(), port2)),
		fmt.Sprintf("egress policy: tcp connection to %s denied: never reachable from a sandbox (an address of the worker's host)", key(h.Local.String(), hostPort)),
		"egress policy: tcp connection to 169.254.169.254:80 denied: never reachable from a sandbox (link-local (metadata) address)",
		"egress policy: DNS lookup of other.test denied: not in the egress allowlist",
	} {
		if !strings.Contains(all, w) {
			t.Errorf("run events:\n%s\nwant one containing %q", all, w)
		}
	}
}
