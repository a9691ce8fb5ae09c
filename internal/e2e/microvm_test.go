package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/workspaces"
)

// The microvm tier's own end-to-end tests: what a VM must hold that the
// tests of every tier (forEachTier) do not ask. On this tier the
// workspace is a disk of the guest's, QEMU is the sandbox's only host
// process, and under TCG a guest is emulation, not a security boundary:
// these tests check that the worker still keeps the guest away from the
// host and cleans up after a VM that died under a run.

// randomMarker is a string nothing on the host or in a guest holds by
// chance.
func randomMarker(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "helmr-e2e-marker-" + hex.EncodeToString(b)
}

// guestProbe runs in a microvm workspace's guest (node, as the sandbox's
// user) and reports what of the host it reaches: each of TARGETS (a JSON
// list of host:port) connected or the error; whether HOST_FILE reads;
// which processes' command lines hold the marker in MARKER_FILE (read
// from a file so that the probe's own command line does not hold it);
// whether the marker is in any file under the guest's usual places; the
// guest's mounts and network interfaces. Controls that each look works:
// it connects to a listener of its own ("self"), and starts a process
// whose command line holds the marker ("child"), which it must find.
const guestProbe = `
const fs = require('fs'), net = require('net'), path = require('path'), cp = require('child_process');
const marker = fs.readFileSync(process.env.MARKER_FILE, 'utf8').trim();
const out = { connects: {}, hostFile: 'unread', markedProcs: [], markedFiles: [], mounts: [], interfaces: [] };
try { fs.readFileSync(process.env.HOST_FILE); out.hostFile = 'read'; } catch (e) { out.hostFile = e.code; }
const child = cp.spawn('sleep', ['60', marker], { stdio: 'ignore' });
const seen = Date.now();
while (Date.now() - seen < 3000 && !fs.existsSync('/proc/' + child.pid + '/cmdline')) {}
for (const p of fs.readdirSync('/proc')) {
  if (!/^[0-9]+$/.test(p)) continue;
  try { if (fs.readFileSync('/proc/' + p + '/cmdline', 'utf8').includes(marker)) out.markedProcs.push(Number(p) === child.pid ? 'child' : p); } catch (e) {}
}
child.kill();
const walk = (dir, depth) => {
  if (depth > 6) return;
  let ents = [];
  try { ents = fs.readdirSync(dir, { withFileTypes: true }); } catch (e) { return; }
  for (const e of ents) {
    const p = path.join(dir, e.name);
    if (p === process.env.MARKER_FILE) continue;
    if (e.isDirectory()) walk(p, depth + 1);
    else if (e.isFile()) { try { if (fs.readFileSync(p, 'utf8').includes(marker)) out.markedFiles.push(p); } catch (e) {} }
  }
};
for (const d of ['/tmp', '/root', '/home', '/run', '/mnt', '/srv', '/opt', '/workspace', '/var/tmp']) walk(d, 0);
out.mounts = fs.readFileSync('/proc/mounts', 'utf8').trim().split('\n').map((l) => l.split(' ').slice(0, 3));
try { out.interfaces = fs.readdirSync('/sys/class/net').sort(); } catch (e) {}
const srv = net.createServer((c) => c.destroy()).listen(0, '127.0.0.1', () => {
  const targets = JSON.parse(process.env.TARGETS);
  targets.push('127.0.0.1:' + srv.address().port);
  let left = targets.length;
  const done = () => {
    if (--left > 0) return;
    out.connects.self = out.connects['127.0.0.1:' + srv.address().port];
    srv.close();
    console.log(JSON.stringify(out));
  };
  for (const t of targets) {
    const i = t.lastIndexOf(':');
    const s = net.connect({ host: t.slice(0, i), port: Number(t.slice(i + 1)) });
    s.setTimeout(5000, () => { out.connects[t] = 'timeout'; s.destroy(); done(); });
    s.on('connect', () => { out.connects[t] = 'connected'; s.destroy(); done(); });
    s.on('error', (e) => { out.connects[t] = e.code; done(); });
  }
});
`

// TestMicroVMIsolation runs the guest probe in a microvm workspace: the
// guest reaches none of the control plane's port (on loopback, through
// the gateway, on each of the host's addresses), nor a port the host
// listens on at every address; it cannot read a file of the host's, nor
// find it under its own trees; it sees no host process (one that carries
// a marker), only its own; its mounts are its own disks and kernel file
// systems, none a share of the host's; its interfaces are eth0 and lo.
func TestMicroVMIsolation(t *testing.T) {
	d := startDev(t, "microvm")
	d.deploy("internal/e2e/testdata/workspace")
	marker := randomMarker(t)
	hostFile := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(hostFile, []byte(marker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("/bin/sh", "-c", "sleep 600 # "+marker)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	ln := acceptAndClose(t, "0.0.0.0:0")
	u, _ := url.Parse(d.url)
	cpPort, anyPort := u.Port(), strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	targets := []string{"127.0.0.1:" + cpPort, network.Gateway.String() + ":" + cpPort, network.Gateway.String() + ":" + anyPort}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
			targets = append(targets, ip.IP.String()+":"+cpPort, ip.IP.String()+":"+anyPort)
		}
	}

	var ws workspaces.Workspace
	if err := json.Unmarshal([]byte(d.mustHelmr("workspace", "create", "--project", "workspace", "--sandbox", "notes", "--json")), &ws); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// The marker goes in as a file, so that no command line holds it; a
	// second copy is the control of the probe's search of the guest's
	// files.
	for _, name := range []string{"marker", "found-me"} {
		if err := d.api.WriteFile(ctx, ws.ID, name, []byte(marker+"\n")); err != nil {
			t.Fatalf("write the marker into the workspace: %v", err)
		}
	}
	tj, _ := json.Marshal(targets)
	res, err := d.api.Exec(ctx, ws.ID, workspaces.ExecRequest{Argv: []string{"node", "-e", guestProbe}, TimeoutSeconds: 120,
		Env: map[string]string{"MARKER_FILE": "/workspace/marker", "HOST_FILE": hostFile, "TARGETS": string(tj)}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("guest probe = %+v, %v", res, err)
	}
	var p struct {
		Connects    map[string]string
		HostFile    string
		MarkedProcs []string
		MarkedFiles []string
		Mounts      [][]string
		Interfaces  []string
	}
	if err := json.Unmarshal([]byte(res.Stdout), &p); err != nil {
		t.Fatalf("guest probe printed %q: %v", res.Stdout, err)
	}
	t.Logf("guest probe: %s", res.Stdout)
	if p.Connects["self"] != "connected" || strings.Join(p.MarkedProcs, ",") != "child" || strings.Join(p.MarkedFiles, ",") != "/workspace/found-me" {
		t.Fatalf("the probe's controls: connect to its own listener %q, marked processes %v, marked files %v; want connected, its child, /workspace/found-me",
			p.Connects["self"], p.MarkedProcs, p.MarkedFiles)
	}
	for _, target := range targets {
		if got := p.Connects[target]; got == "" || got == "connected" {
			t.Errorf("guest connect to the host's %s = %q, want it refused", target, got)
		}
	}
	if p.HostFile != "ENOENT" {
		t.Errorf("guest read of the host's %s = %q, want ENOENT", hostFile, p.HostFile)
	}
	for _, m := range p.Mounts {
		if len(m) < 3 {
			continue
		}
		switch src, fstype := m[0], m[2]; fstype {
		case "9p", "virtiofs", "nfs", "nfs4", "cifs", "smb3", "fuse", "vboxsf":
			t.Errorf("guest mount %v shares a host file system", m)
		case "ext4", "ext3", "ext2", "xfs", "btrfs":
			if !strings.HasPrefix(src, "/dev/vd") {
				t.Errorf("guest mount %v is not one of the VM's own disks", m)
			}
		}
	}
	if strings.Join(p.Interfaces, ",") != "eth0,lo" {
		t.Errorf("guest interfaces = %v, want eth0 and lo", p.Interfaces)
	}
}

// TestMicroVMCrash kills a run's QEMU from the host while the task runs:
// the run fails as guest_runtime naming QEMU's exit, and nothing of the
// sandbox is left on the host: no process, mount, loop device, state or
// sandbox directory, cgroup. The workspace survives as the guest left it
// (clean for the host to read) and the next run on it completes.
func TestMicroVMCrash(t *testing.T) {
	d := startDev(t, "microvm")
	d.deploy("internal/e2e/testdata/workspace")
	first := d.waitDone(mustRun(t, d.mustHelmr("run", "notes", "--project", "workspace", "--payload-json", `{"line":"one"}`, "--json")).ID, 2*time.Minute)
	if first.Status != runs.StatusCompleted {
		t.Fatalf("first run = %s %+v", first.Status, first.Error)
	}
	ws := first.WorkspaceID
	r := mustRun(t, d.mustHelmr("run", "notes", "--project", "workspace", "--payload-json", `{"line":"never","sleepMs":120000}`,
		"--workspace", ws, "--json"))
	waitFor(t, 2*time.Minute, func() bool {
		cur, err := d.api.GetRun(t.Context(), r.ID)
		return err == nil && cur.Status == runs.StatusRunning
	})
	sbx := d.sandboxID(r.ID)
	qemu := sandboxProcesses(sbx)
	if len(qemu) != 1 {
		t.Fatalf("host processes of sandbox %s = %v, want its QEMU alone", sbx, qemu)
	}
	if cmd, _ := os.ReadFile("/proc/" + qemu[0] + "/cmdline"); !bytes.Contains(cmd, []byte("qemu-system")) {
		t.Fatalf("process %s of sandbox %s is %q, not QEMU", qemu[0], sbx, cmd)
	}
	// The control: while the sandbox runs, the look below finds it.
	stateRoot := lastValue(d.base, "HELMR_STATE_DIR")
	running := strings.Join(sandboxLeftovers(t, sbx, stateRoot, d.dataDir), "\n")
	for _, want := range []string{"process " + qemu[0], "cgroup /sys/fs/cgroup", "path " + stateRoot, "path " + filepath.Join(d.dataDir, "booted", sbx)} {
		if !strings.Contains(running, want) {
			t.Fatalf("the running sandbox's traces:\n%s\nlack %q: the look after the crash would miss it", running, want)
		}
	}
	pid, _ := strconv.Atoi(qemu[0])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	final := d.waitDone(r.ID, time.Minute)
	if final.Status != runs.StatusFailed || final.Error == nil || final.Error.Class != runs.ClassGuestRuntime ||
		!strings.Contains(final.Error.Message, "qemu exited") {
		t.Fatalf("run whose QEMU was killed = %s %+v, want FAILED/guest_runtime naming QEMU's exit", final.Status, final.Error)
	}

	// Nothing of the sandbox is left.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left := sandboxLeftovers(t, sbx, stateRoot, d.dataDir)
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s left behind:\n%s", sbx, strings.Join(left, "\n"))
		}
	}

	// The workspace is the guest's as it died: what the first run wrote,
	// readable on the host, and the next run takes it.
	if data, err := workspaceFile(t, d.dataDir, ws, "notes.txt"); err != nil || string(data) != "one\n" {
		t.Errorf("workspace notes.txt after the crash = %q, %v; want the first run's line", data, err)
	}
	next := d.waitDone(mustRun(t, d.mustHelmr("run", "notes", "--project", "workspace", "--payload-json", `{"line":"two"}`,
		"--workspace", ws, "--json")).ID, 2*time.Minute)
	if next.Status != runs.StatusCompleted || string(next.Output) != `"one\n"` {
		t.Errorf("run after the crash = %s %s %+v, want COMPLETED with the first run's line", next.Status, next.Output, next.Error)
	}
}

// sandboxLeftovers lists what of sandbox sbx is still on the host: its
// processes (QEMU, by its cgroup), mounts naming it, loop devices backed
// by a file of it or of the data dir's booted sandboxes, files or
// directories named for it under the state root or the data dir, and
// cgroups named for it.
func sandboxLeftovers(t *testing.T, sbx, stateRoot, dataDir string) []string {
	t.Helper()
	var left []string
	for _, p := range sandboxProcesses(sbx) {
		left = append(left, "process "+p)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, sbx) {
			left = append(left, "mount "+line)
		}
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range loops {
		if b, err := os.ReadFile(f); err == nil && (bytes.Contains(b, []byte(sbx)) || bytes.Contains(b, []byte(filepath.Join(dataDir, "booted")))) {
			left = append(left, "loop device "+f+" on "+strings.TrimSpace(string(b)))
		}
	}
	for _, root := range []string{stateRoot, dataDir} {
		_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err == nil && strings.Contains(e.Name(), sbx) {
				left = append(left, "path "+p)
			}
			return nil
		})
	}
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, e fs.DirEntry, err error) error {
		switch {
		case err != nil || !e.IsDir():
			return nil
		case e.Name() == sbx:
			left = append(left, "cgroup "+p)
			return fs.SkipDir
		case strings.Count(p, "/") > 6: // the tier's cgroups are near the top
			return fs.SkipDir
		}
		return nil
	})
	return left
}
