package microvm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/microvm/guestfmt"
	"github.com/helmr/helmr/internal/sandbox/sandboxtest"
	"github.com/helmr/helmr/internal/testenv"
)

// agentPath is the helmr-agent built once for this package (TestMain).
var agentPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.MainWithAgent(m, &agentPath)) }

// requiresMicroVM skips (fails on CI) unless root, QEMU and the guest
// kernel scripts/install-microvm.sh installs are here.
func requiresMicroVM(t testing.TB) guestfmt.Kernel {
	t.Helper()
	testenv.RequireRoot(t)
	_, err := exec.LookPath("qemu-system-x86_64")
	testenv.Require(t, err == nil, "qemu-system-x86_64 not installed: run scripts/install-microvm.sh")
	k, err := guestfmt.FindKernel(testenv.CacheDir())
	testenv.Require(t, err == nil, "no guest kernel: run scripts/install-microvm.sh")
	return k
}

// newRuntime returns a Runtime with its own state directory. The layer
// images it makes of the base root filesystem are kept in the cache
// between tests (HELMR_CACHE_DIR/microvm/test-layers): making one takes
// seconds.
func newRuntime(t testing.TB) *Runtime {
	t.Helper()
	return newRuntimeWith(t, func(c *Config) { c.VMM = VMMQEMU })
}

// newRuntimeWith is newRuntime with more of the config set by set.
func newRuntimeWith(t testing.TB, set func(*Config)) *Runtime {
	t.Helper()
	k := requiresMicroVM(t)
	state := filepath.Join(testenv.StateRoot(t), "microvm")
	cfg := Config{
		Kernel:    k,
		AgentPath: agentPath,
		StateDir:  state,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	set(&cfg)
	rt, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Logf("microvm accelerator: %s (%s)", rt.Accel(), rt.accelWhy)
	return rt
}

// conformance is where this tier differs from the process tier: task code
// runs on the guest's kernel, which enforces the process limit itself and
// tells the host nothing of it; the workspace is a block device of the
// guest's, seen by the host once the sandbox ends.
var conformance = sandboxtest.Options{
	GuestKernel:         true,
	PidsLimitUnreported: true,
	WorkspaceImage:      true,
}

func TestConformance(t *testing.T) {
	requiresMicroVM(t)
	rootfs := sandboxtest.BaseRootFS(t)
	sandboxtest.RunWithOptions(t, func(t *testing.T) sandbox.Runtime { return newRuntime(t) }, rootfs, conformance)
}

// TestBootExec boots one guest, runs a process, checks the runtime
// contract's files and that the workspace reaches the host when the
// sandbox ends.
func TestBootExec(t *testing.T) {
	rt := newRuntime(t)
	rootfs := sandboxtest.BaseRootFS(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "existing"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{ID: "boot-exec", RootLayers: []string{rootfs}, WorkspaceHost: ws, UID: 1000, GID: 1000,
		Hostname: "vm-host", DNS: []string{"192.0.2.53"}, MemoryBytes: 512 << 20, CPU: 1}
	start := time.Now()
	sb, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	t.Logf("cold boot to agent ready: %v (%s)", time.Since(start), rt.Accel())
	defer sb.Destroy(context.Background())
	// QEMU runs as a uid of its own, in namespaces of its own.
	pid := sb.(*Sandbox).Pid()
	for _, ns := range []string{"net", "pid", "mnt", "ipc", "uts"} {
		ours, _ := os.Readlink("/proc/self/ns/" + ns)
		theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil || theirs == ours {
			t.Errorf("qemu's %s namespace = %q (%v), want one of its own (ours: %q)", ns, theirs, err, ours)
		}
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err != nil || !strings.Contains(string(st), fmt.Sprintf("Uid:\t%d\t", DefaultQEMUUID)) {
		t.Errorf("qemu's uid: %v; want %d", err, DefaultQEMUUID)
	}
	out := run(t, sb, "sh", "-c", "cat existing; hostname; cat /etc/resolv.conf; id -u; uname -r; echo made-in-vm > new; "+
		"grep -c ' / overlay ' /proc/mounts; test -w /; echo root-writable")
	want := []string{"from the host", "vm-host", "nameserver 192.0.2.53", "1000", rt.cfg.Kernel.Version, "1", "root-writable"}
	if got := strings.Split(strings.TrimSpace(out), "\n"); !slices.Equal(got, want) {
		t.Errorf("guest printed %q, want %q", got, want)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy() = %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "new")); err != nil || string(b) != "made-in-vm\n" {
		t.Errorf("host workspace file new = %q, %v; want the guest's write", b, err)
	}
	if _, err := os.Stat(filepath.Join(rt.cfg.sandboxes(), spec.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox dir after Destroy: %v, want gone", err)
	}
}

// TestGuestPanic checks that a guest kernel panic fails Exec with
// ErrGuestRuntime and that Destroy still cleans up.
func TestGuestPanic(t *testing.T) {
	rt := newRuntime(t)
	spec := sandbox.Spec{ID: "panic", RootLayers: []string{sandboxtest.BaseRootFS(t)}, WorkspaceHost: t.TempDir(), MemoryBytes: 256 << 20}
	sb, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer sb.Destroy(context.Background())
	s := sb.(*Sandbox)
	// The agent is the guest's init: killing QEMU's guest from the host
	// side is the crash; a panic of the guest kernel ends QEMU the same
	// way (panic=-1, -no-reboot).
	if err := s.proc.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	_, err = sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, sandbox.ErrGuestRuntime) {
		t.Errorf("Exec after QEMU died = %v, want ErrGuestRuntime", err)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Errorf("Destroy() = %v", err)
	}
}

func run(t *testing.T, sb sandbox.Sandbox, argv ...string) string {
	t.Helper()
	var out, errOut strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := sb.Exec(ctx, sandbox.ExecRequest{
		Argv: argv, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		OnOutput: func(stream string, data []byte) {
			if stream == "stdout" {
				out.Write(data)
			} else {
				errOut.Write(data)
			}
		},
	})
	if err != nil || st.Code != 0 {
		t.Fatalf("Exec(%q) = %+v, %v; stderr %q", argv, st, err, errOut.String())
	}
	return out.String()
}

// TestBootSnapshot starts two sandboxes of one shape: the first boots and
// leaves a snapshot of its idle guest, the second starts from it, with
// its own workspace, clock and entropy.
func TestBootSnapshot(t *testing.T) {
	rt := newRuntime(t)
	rootfs := sandboxtest.BaseRootFS(t)
	start := func(id string) (sandbox.Sandbox, string) {
		ws := t.TempDir()
		if err := os.WriteFile(filepath.Join(ws, "who"), []byte(id+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		begin := time.Now()
		sb, err := rt.Start(context.Background(), sandbox.Spec{ID: id, RootLayers: []string{rootfs}, WorkspaceHost: ws,
			UID: 1000, GID: 1000, Hostname: id, MemoryBytes: 256 << 20, CPU: 1})
		if err != nil {
			t.Fatalf("Start(%s) = %v", id, err)
		}
		t.Cleanup(func() { sb.Destroy(context.Background()) })
		t.Logf("%s: agent ready in %v (from a boot snapshot: %v)", id, time.Since(begin), sb.(*Sandbox).fromBoot)
		return sb, run(t, sb, "sh", "-c", "cat who; hostname; cat /proc/sys/kernel/random/boot_id; head -c 16 /dev/urandom | od -An -tx1; date +%s; cat /etc/machine-id")
	}
	first, out1 := start("snap-one")
	// The second guest's clock comes from the host at its start: an hour
	// ahead here, so that a guest keeping its snapshot's clock shows.
	ahead := time.Hour
	rt.now = func() time.Time { return time.Now().Add(ahead) }
	second, out2 := start("snap-two")
	if first.(*Sandbox).fromBoot || !second.(*Sandbox).fromBoot {
		t.Fatalf("from a boot snapshot: first %v, second %v; want false, true", first.(*Sandbox).fromBoot, second.(*Sandbox).fromBoot)
	}
	l1, l2 := strings.Split(strings.TrimSpace(out1), "\n"), strings.Split(strings.TrimSpace(out2), "\n")
	if len(l1) != 6 || len(l2) != 6 {
		t.Fatalf("guests printed %q and %q, want 6 lines each", l1, l2)
	}
	if l2[0] != "snap-two" || l2[1] != "snap-two" {
		t.Errorf("restored guest's workspace file and hostname = %q, %q; want its own (snap-two)", l2[0], l2[1])
	}
	for i, what := range map[int]string{2: "boot id", 3: "random bytes", 5: "machine id"} {
		if l1[i] == l2[i] {
			t.Errorf("both guests have %s %q: a restored guest must get fresh entropy", what, l1[i])
		}
	}
	now := time.Now().Add(ahead).Unix()
	if sec, err := strconv.ParseInt(l2[4], 10, 64); err != nil || sec < now-30 || sec > now+1 {
		t.Errorf("restored guest's clock = %q, want the host's at its start, about %d", l2[4], now)
	}
}
