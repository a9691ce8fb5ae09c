package sandboxtest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/sandbox"
)

// runIsolation checks the boundary on a sandbox whose processes run as the
// image's root: even so they hold no capability, write the image only in
// their own copy-on-write layer, never in its layers, cannot write
// Helmr's paths, see no host process or network and are not host root.
func runIsolation(t *testing.T, newRuntime func(t *testing.T) sandbox.Runtime, rootfs string, opts Options) {
	hostnameBefore, _ := os.ReadFile(filepath.Join(rootfs, "etc/hostname"))
	f := start(t, newRuntime(t), rootfs, func(s *sandbox.Spec) { s.UID, s.GID = 0, 0 })

	t.Run("NoCapabilities", func(t *testing.T) {
		status := f.OK(t, "cat", "/proc/self/status")
		rootCaps := fmt.Sprintf("%016x", opts.RootCaps)
		for _, field := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
			want := "0000000000000000"
			if field == "CapPrm" || field == "CapEff" || field == "CapBnd" {
				want = rootCaps
			}
			if v := statusField(status, field); v != want {
				t.Errorf("%s = %q, want %s", field, v, want)
			}
		}
		if v := statusField(status, "NoNewPrivs"); v != "1" {
			t.Errorf("NoNewPrivs = %q, want 1", v)
		}
	})
	t.Run("NotHostRoot", func(t *testing.T) {
		if opts.GuestKernel {
			testNoHostProcess(t, f)
			return
		}
		m := strings.Fields(f.OK(t, "cat", "/proc/self/uid_map"))
		if len(m) < 3 || m[0] == "0" && m[1] == "0" {
			t.Errorf("uid_map = %q; want uid 0 mapped to a host uid other than 0", m)
		}
	})
	t.Run("WritesOutsideWorkspace", func(t *testing.T) {
		got := f.Node(t, writeProbeJS)
		want := "/etc/x:ok /usr/x:ok /x:ok /opt/helmr/x:denied /etc/hostname:denied /etc/hosts:denied " +
			"/etc/resolv.conf:denied /tmp/x:ok /dev/shm/x:ok /workspace/x:ok \n"
		if got != want {
			t.Errorf("write probe = %q, want %q", got, want)
		}
	})
	t.Run("PrivilegedCallsDenied", func(t *testing.T) {
		for _, script := range []string{
			"mkdir -p /tmp/m && mount -t tmpfs none /tmp/m",
			"unshare -U -r true",
			"unshare -n true",
		} {
			r := f.Exec(t, "sh", "-c", script)
			if r.Err != nil || r.Status.Code == 0 {
				t.Errorf("Exec(%q) = %+v, %v; want a failure", script, r.Status, r.Err)
			}
		}
	})
	t.Run("OwnProcesses", func(t *testing.T) {
		got := f.Node(t, `const fs = require('fs');
console.log(fs.readdirSync('/proc').filter(e => /^\d+$/.test(e)).length,
  fs.readFileSync('/proc/1/cmdline', 'utf8').split('\0')[0], process.pid !== 1)`)
		fields := strings.Fields(got)
		n, _ := strconv.Atoi(fields[0])
		if len(fields) != 3 || n < 2 || n > 4 || !strings.Contains(fields[1], "helmr-agent") || fields[2] != "true" {
			t.Errorf("sandbox processes = %q; want 2..4 pids with the agent as pid 1", got)
		}
	})
	t.Run("NetworkLoopbackOnly", func(t *testing.T) { testNetwork(t, f) })
	t.Run("LayersUntouched", func(t *testing.T) {
		entries, err := os.ReadDir(f.TopLayer)
		if err != nil || len(entries) != 1 || entries[0].Name() != marker {
			t.Errorf("top layer on the host = %v, %v; want only %s", entries, err, marker)
		}
		after, _ := os.ReadFile(filepath.Join(rootfs, "etc/hostname"))
		if string(after) != string(hostnameBefore) {
			t.Errorf("base rootfs etc/hostname = %q, was %q", after, hostnameBefore)
		}
		for _, p := range []string{"x", "etc/x", "usr/x"} {
			if _, err := os.Lstat(filepath.Join(rootfs, p)); err == nil {
				t.Errorf("the sandbox's /%s reached the base rootfs on the host", p)
			}
		}
	})
}

// testNoHostProcess: a process running in the sandbox (as its uid 0) is
// not a host process.
func testNoHostProcess(t *testing.T, f *fixture) {
	const arg = "876543.219"
	f.OK(t, "sh", "-c", "sleep "+arg+" </dev/null >/dev/null 2>&1 &")
	inside := f.Node(t, `const fs = require('fs');
console.log(fs.readdirSync('/proc').filter(e => /^\d+$/.test(e)).some(p => {
  try { return fs.readFileSync('/proc/' + p + '/cmdline', 'utf8').split('\0').includes('`+arg+`'); } catch { return false; }
}))`)
	if inside != "true\n" {
		t.Fatalf("sleep %s running in the sandbox = %q, want true", arg, inside)
	}
	if pids := hostProcsWith(arg); len(pids) > 0 {
		t.Errorf("the sandbox's sleep %s is host process %v; want none", arg, pids)
	}
}

// writeProbeJS tries to write files and prints path:ok|denied|<code>.
const writeProbeJS = `
const fs = require('fs');
let out = '';
for (const p of ['/etc/x', '/usr/x', '/x', '/opt/helmr/x', '/etc/hostname', '/etc/hosts', '/etc/resolv.conf', '/tmp/x', '/dev/shm/x', '/workspace/x']) {
  try { fs.writeFileSync(p, 'x'); out += p + ':ok '; }
  catch (e) { out += p + ':' + (e.code === 'EROFS' || e.code === 'EACCES' || e.code === 'EPERM' ? 'denied' : e.code) + ' '; }
}
console.log(out);
`

func statusField(status, name string) string {
	for _, line := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func testNetwork(t *testing.T, f *fixture) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	script := `const net = require('net'), fs = require('fs');
const ifaces = fs.readFileSync('/proc/net/dev', 'utf8').split('\n').slice(2)
  .map(l => l.split(':')[0].trim()).filter(Boolean);
const host = net.connect(` + strconv.Itoa(port) + `, '127.0.0.1');
host.on('connect', () => { console.log('host-reachable'); process.exit(1); });
host.on('error', (e) => {
  const srv = net.createServer(c => c.end('pong')).listen(0, '127.0.0.1', () => {
    net.connect(srv.address().port, '127.0.0.1').on('data', d => {
      console.log(ifaces.join(','), e.code, d.toString()); process.exit(0);
    });
  });
});`
	if got := f.Node(t, script); got != "lo ECONNREFUSED pong\n" {
		t.Errorf("network probe = %q, want only lo, the host's listener refused, own loopback working", got)
	}
}
