package sandboxtest

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/sandbox/network/nettest"
)

// testEgress: a sandbox with a network gets eth0, the runtime's resolver
// and outbound TCP under the egress policy, enforced by the worker: the
// test host is reachable when the policy allows it and refused when not,
// and the host's own ports and link-local metadata addresses never are.
// All traffic stays on this machine (a test host in a namespace the test
// creates).
func testEgress(t *testing.T, newRuntime func(t *testing.T) sandbox.Runtime, rootfs string) {
	h := nettest.NewHost(t)
	port := h.Serve(t, h.Addr, 0, "hello from the test host")
	port2 := h.Serve(t, h.Addr2, 0, "hello from a named host")
	const bulkSize = 24 << 20
	bulk := h.ServeBulk(t, h.Addr, bulkSize)
	dns := h.ServeDNS(t, h.Addr, map[string]netip.Addr{
		"svc.helmr.test": h.Addr, "api.allowed.test": h.Addr2, "denied.test": h.Addr2,
	})
	hostLn, err := net.Listen("tcp", "0.0.0.0:0") // stands in for the control plane's port
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	hostPort := hostLn.Addr().(*net.TCPAddr).Port

	var mu sync.Mutex
	var denials []string
	withPolicy := func(policy string) func(*sandbox.Spec) {
		p, err := network.ParsePolicy(policy)
		if err != nil {
			t.Fatal(err)
		}
		cfg := &network.Config{Policy: p, Upstream: []netip.AddrPort{dns.Addr},
			Report: func(id string, d network.Denial) {
				mu.Lock()
				defer mu.Unlock()
				denials = append(denials, d.String())
			}}
		return func(s *sandbox.Spec) { s.Network, s.DNS = cfg, nil }
	}
	// probe is a node script: connect(host, port) prints the server's
	// reply or the error code; lookup(name) prints the address or code.
	const probe = `const net = require('net'), dns = require('dns'), fs = require('fs');
const connect = (host, port) => new Promise(res => {
  const c = net.connect({host, port, timeout: 20000});
  let got = '';
  c.on('data', d => got += d).on('end', () => res(got))
   .on('timeout', () => { c.destroy(); res('TIMEOUT'); }).on('error', e => res(e.code));
});
const download = (host, port) => new Promise(res => {
  let n = 0;
  net.connect({host, port}).on('data', d => n += d.length).on('end', () => res(n)).on('error', e => res(e.code));
});
const lookup = name => new Promise(res => dns.lookup(name, {family: 4}, (e, a) => res(e ? 'ERR' : a)));
const ifaces = fs.readFileSync('/proc/net/dev', 'utf8').split('\n').slice(2).map(l => l.split(':')[0].trim()).filter(Boolean).sort();
`
	addr := func(a netip.Addr) string { return "'" + a.String() + "'" }

	t.Run("Open", func(t *testing.T) {
		f := start(t, newRuntime(t), rootfs, withPolicy("open"))
		got := f.Node(t, probe+`(async () => {
  console.log(ifaces.join(','));
  console.log(fs.readFileSync('/etc/resolv.conf', 'utf8').trim());
  const a = await lookup('svc.helmr.test');
  console.log(a);
  console.log(await connect(a, `+strconv.Itoa(port)+`));
  console.log(await connect(`+addr(h.Local)+`, `+strconv.Itoa(hostPort)+`));
  console.log(await connect('169.254.169.254', 80));
  console.log(await connect('`+network.Gateway.String()+`', `+strconv.Itoa(hostPort)+`));
  console.log(await download(a, `+strconv.Itoa(bulk)+`));
})()`)
		want := strings.Join([]string{
			"eth0,lo", "nameserver " + network.DNSAddr.String(), h.Addr.String(), "hello from the test host",
			"ECONNREFUSED", "ECONNREFUSED", "ECONNREFUSED", strconv.Itoa(bulkSize),
		}, "\n") + "\n"
		if got != want {
			t.Errorf("open policy probe:\n%s\nwant:\n%s", got, want)
		}
	})
	t.Run("Allowlist", func(t *testing.T) {
		f := start(t, newRuntime(t), rootfs, withPolicy("allow:"+h.Addr.String()+"/32,"+h.Local.String()+",*.allowed.test"))
		got := f.Node(t, probe+`(async () => {
  console.log(await connect(`+addr(h.Addr)+`, `+strconv.Itoa(port)+`));
  console.log(await connect(`+addr(h.Addr2)+`, `+strconv.Itoa(port2)+`));
  console.log(await lookup('denied.test'));
  const a = await lookup('api.allowed.test');
  console.log(a);
  console.log(await connect(a, `+strconv.Itoa(port2)+`));
  console.log(await connect(`+addr(h.Local)+`, `+strconv.Itoa(hostPort)+`));
})()`)
		want := strings.Join([]string{
			// An unlisted address is accepted (a TLS or HTTP name could
			// allow it), then reset when the silent client names none.
			"hello from the test host", "ECONNRESET", "ERR", h.Addr2.String(), "hello from a named host", "ECONNREFUSED",
		}, "\n") + "\n"
		if got != want {
			t.Errorf("allowlist probe:\n%s\nwant:\n%s", got, want)
		}
		for _, name := range dns.Asked() {
			if name == "denied.test" {
				t.Error("a name outside the allowlist reached the upstream resolver")
			}
		}
	})
	t.Run("None", func(t *testing.T) {
		f := start(t, newRuntime(t), rootfs, withPolicy("none"))
		got := f.Node(t, probe+`(async () => {
  console.log(ifaces.join(','));
  console.log(await lookup('svc.helmr.test'));
  console.log(await connect(`+addr(h.Addr)+`, `+strconv.Itoa(port)+`));
})()`)
		if got != "lo\nERR\nENETUNREACH\n" {
			t.Errorf("none policy probe = %q, want only lo, no resolver, no route", got)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	rep := strings.Join(denials, "\n")
	for _, want := range []string{
		"tcp connection to " + net.JoinHostPort(h.Local.String(), strconv.Itoa(hostPort)) + " denied: never reachable from a sandbox (an address of the worker's host)",
		"tcp connection to 169.254.169.254:80 denied: never reachable from a sandbox (link-local (metadata) address)",
		"DNS lookup of denied.test denied: not in the egress allowlist",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("denials reported:\n%s\nwant a line containing %q", rep, want)
		}
	}
}
