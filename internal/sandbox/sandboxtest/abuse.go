package sandboxtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/disk"
)

// testAbuse runs, as the sandbox's root (the strongest user a task can
// be), what a hostile task would try first, and checks that each attempt
// is refused or sees nothing of the host: mounting, reaching host files,
// poking the kernel through /proc, and opening the host's loopback.
func testAbuse(t *testing.T, rt sandbox.Runtime, rootfs string) {
	secret, err := os.CreateTemp("", "helmr-host-secret-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secret.Name())
	secret.WriteString("host secret\n")
	secret.Close()

	envBefore, err := os.ReadFile(filepath.Join(rootfs, "usr/bin/env"))
	if err != nil {
		t.Fatal(err)
	}
	f := start(t, rt, rootfs, func(s *sandbox.Spec) { s.UID, s.GID = 0, 0 })
	attempts := []struct {
		name string
		argv []string
	}{
		{"mount a filesystem", []string{"mount", "-t", "tmpfs", "none", "/mnt"}},
		{"remount the root writable", []string{"mount", "-o", "remount,rw", "/"}},
		{"read a host file by its host path", []string{"cat", secret.Name()}},
		{"trigger sysrq", []string{"sh", "-c", "echo h > /proc/sysrq-trigger"}},
		{"change a kernel setting", []string{"sh", "-c", "echo 1 > /proc/sys/vm/drop_caches"}},
		{"write Helmr's files", []string{"sh", "-c", "echo x > /opt/helmr/hello.js"}},
		{"redirect the sandbox's DNS", []string{"sh", "-c", "echo nameserver 10.0.0.1 > /etc/resolv.conf"}},
		{"unmount an identity file", []string{"umount", "/etc/hosts"}},
		{"new user namespace", []string{"unshare", "--user", "--map-root-user", "true"}},
		{"new mount namespace", []string{"unshare", "--mount", "true"}},
		{"new pid namespace", []string{"unshare", "--pid", "--fork", "true"}},
		{"enter the agent's namespaces", []string{"nsenter", "--target", "1", "--mount", "true"}},
		// The agent is pid 1: a task that could trace it could read what the
		// agent holds for other processes.
		{"ptrace the agent", perlSyscall(101, 16, 1, 0, 0)}, // PTRACE_ATTACH pid 1
		{"read the agent's memory", []string{"perl", "-e", vmRead}},
		{"load a BPF program", perlSyscall(321, 5, 0, 0)},                        // bpf(BPF_PROG_LOAD, NULL)
		{"open a perf event", perlSyscall(298, 0, 0, 0xffffffff, 0xffffffff, 0)}, // perf_event_open
	}
	for _, a := range attempts {
		r := f.Exec(t, a.argv...)
		if r.Err == nil && r.Status.Code == 0 {
			t.Errorf("%s: `%s` succeeded (stdout %q), want it refused", a.name, strings.Join(a.argv, " "), r.Stdout)
		}
		if strings.Contains(r.Stdout, "host secret") {
			t.Errorf("%s: the host file's content reached the sandbox", a.name)
		}
	}
	// The refusals changed nothing the sandbox's own processes rely on.
	f.OK(t, "true")
	// Writing the image's files lands in the sandbox's own layer only.
	f.OK(t, "sh", "-c", "echo x > /usr/bin/helmr-abuse && echo x >> /usr/bin/env")
	if _, err := os.Lstat(filepath.Join(rootfs, "usr/bin/helmr-abuse")); err == nil {
		t.Error("a file the sandbox wrote to /usr/bin reached the image on the host")
	}
	if b, err := os.ReadFile(filepath.Join(rootfs, "usr/bin/env")); err != nil || string(b) != string(envBefore) {
		t.Errorf("the image's /usr/bin/env on the host = %d bytes, %v; want it unchanged (%d bytes)", len(b), err, len(envBefore))
	}
}

// perlSyscall makes one raw system call and exits 0 if the kernel took it:
// it succeeded, or failed for a reason other than being refused (EPERM,
// EACCES, ENOSYS), such as EFAULT for the NULL arguments.
func perlSyscall(nr int, args ...int) []string {
	call := fmt.Sprintf("syscall(%d", nr)
	for _, a := range args {
		call += fmt.Sprintf(", %d", a)
	}
	return []string{"perl", "-e", `$r = ` + call + `); print "errno=", $!+0, "\n"; ` + refusedOrExit}
}

// refusedOrExit ends a perl probe: exit 1 if the last call was refused
// (EPERM, EACCES, ENOSYS, or ENODEV for a kernel feature the sandbox
// does not offer), else 0.
const refusedOrExit = `exit($r == -1 && ($!{EPERM} || $!{EACCES} || $!{ENOSYS} || $!{ENODEV}) ? 1 : 0)`

// vmRead reads one byte of pid 1's memory with process_vm_readv: EFAULT or
// success means the kernel would have read the agent's memory.
const vmRead = `my $buf = "\0"; my $local = pack("QQ", unpack("Q", pack("p", $buf)), 1);
my $remote = pack("QQ", 0x400000, 1);
$r = syscall(310, 1, $local, 1, $remote, 1, 0); print "errno=", $!+0, "\n"; ` + refusedOrExit

// testWorkspaceQuota: a task that writes past its workspace's quota (the
// workspace on a disk of its own, as the worker gives it) gets ENOSPC,
// the host holds no more than the quota for it, and the sandbox goes on.
// A tier that takes the disk as an image (opts.WorkspaceImage) gets it
// unmounted; the host's checks then mount it again once the sandbox is
// destroyed.
func testWorkspaceQuota(t *testing.T, rt sandbox.Runtime, rootfs string, opts Options) {
	const quota = 32 << 20
	tmp := t.TempDir()
	ws := filepath.Join(tmp, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := disk.Create(filepath.Join(tmp, "ws.img"), ws, quota, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	mutate := func(s *sandbox.Spec) { s.WorkspaceHost = ws }
	if opts.WorkspaceImage {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		mutate = func(s *sandbox.Spec) { s.WorkspaceHost, s.WorkspaceImage = "", d.Image }
	}
	f := start(t, rt, rootfs, mutate)
	got := f.Node(t, `const fs = require('fs');
const chunk = Buffer.alloc(1 << 20, 120);
let written = 0, code = 'none';
const fd = fs.openSync('/workspace/fill', 'w');
try {
  for (let i = 0; i < 128; i++) { written += fs.writeSync(fd, chunk); }
  fs.fsyncSync(fd);
} catch (e) { code = e.code; }
try { fs.closeSync(fd); } catch (e) { if (code === 'none') code = e.code; }
fs.writeFileSync('/tmp/still-writable', 'yes');
console.log(code, written <= `+strconv.Itoa(quota)+`, fs.readFileSync('/tmp/still-writable', 'utf8'));`)
	if got != "ENOSPC true yes\n" {
		t.Errorf("filling a %d MiB workspace: %q, want ENOSPC within the quota, /tmp still writable", quota>>20, got)
	}
	f.OK(t, "true")
	if opts.WorkspaceImage {
		if err := f.SB.Destroy(context.Background()); err != nil {
			t.Fatalf("Destroy() = %v", err)
		}
		if d, err = disk.Mount(d.Image, ws, false); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(filepath.Join(ws, "fill")); err != nil || fi.Size() < quota/2 {
			t.Errorf("the sandbox's fill on the host after Destroy: %v, %v; want most of the quota", fi, err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(d.Image, &st); err != nil || st.Blocks*512 > quota {
		t.Errorf("the workspace image holds %d bytes on the host (%v), over the %d-byte quota", st.Blocks*512, err, quota)
	}
	if !d.Full() {
		t.Error("the disk is not full after the sandbox filled it")
	}
}
