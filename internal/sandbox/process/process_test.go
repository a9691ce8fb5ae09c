package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/helmr/helmr/internal/testenv"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/sandboxtest"
)

// agentPath is the helmr-agent built once for this package (TestMain).
var agentPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.MainWithAgent(m, &agentPath)) }

// requiresProcessTier skips where the tier cannot run: not root, or no
// cgroup controllers for memory and pids.
func requiresProcessTier(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	_, err := newCgroup(DefaultCgroupRoot, "probe")
	testenv.Require(t, err == nil, fmt.Sprintf("process tier tests need cgroups: %v", err))
}

// newRuntime returns a Runtime without a warm pool.
func newRuntime(t *testing.T) *Runtime { return newWarmRuntime(t, 0) }

// newWarmRuntime returns a Runtime with a warm pool of warm agents, full,
// closed when the test ends.
func newWarmRuntime(t testing.TB, warm int) *Runtime {
	t.Helper()
	state := t.TempDir() // and its parent: 0700
	for _, d := range []string{state, filepath.Dir(state)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := New(Config{
		AgentPath: agentPath,
		StateDir:  state,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		WarmPool:  warm,
	})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	if warm > 0 {
		waitIdle(t, rt, warm)
	}
	return rt
}

func TestConformance(t *testing.T) {
	requiresProcessTier(t)
	rootfs := sandboxtest.BaseRootFS(t)
	for _, warm := range []int{0, 1} {
		t.Run(fmt.Sprintf("WarmPool=%d", warm), func(t *testing.T) {
			sandboxtest.Run(t, func(t *testing.T) sandbox.Runtime { return newWarmRuntime(t, warm) }, rootfs)
		})
	}
}

func TestReservedWorkspace(t *testing.T) {
	requiresProcessTier(t)
	rt := newRuntime(t)
	layer := t.TempDir()
	for _, ws := range []string{"/tmp", "/proc/x", "/", "/opt/helmr/app", "relative", "/a/../tmp"} {
		_, err := rt.Start(context.Background(), sandbox.Spec{
			ID: "reserved", RootLayers: []string{layer}, WorkspaceHost: t.TempDir(), Workspace: ws,
		})
		if !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("Start(Workspace %q) = %v, want ErrInvalidSpec", ws, err)
		}
	}
}

func TestHostSide(t *testing.T) {
	requiresProcessTier(t)
	rootfs := sandboxtest.BaseRootFS(t)
	rt := newRuntime(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "existing"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{ID: "host-side", RootLayers: []string{rootfs}, WorkspaceHost: ws, UID: 1000, GID: 1001}
	sb, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer sb.Destroy(context.Background())
	cg := sb.(*Sandbox).cg
	for _, p := range []string{ws, filepath.Join(ws, "existing")} {
		uid, gid := owner(t, p)
		if uid != DefaultUIDBase+1000 || gid != DefaultUIDBase+1001 {
			t.Errorf("owner of %s = %d:%d, want %d:%d", p, uid, gid, DefaultUIDBase+1000, DefaultUIDBase+1001)
		}
	}
	for _, d := range cg.dirs() {
		if _, err := os.Stat(filepath.Join(d, "cgroup.procs")); err != nil {
			t.Errorf("cgroup %s missing while running: %v", d, err)
		}
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy() = %v", err)
	}
	for _, d := range append(cg.dirs(), sb.(*Sandbox).stateDir) {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Destroy, stat %s = %v, want not exist", d, err)
		}
	}
}

func owner(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// TestGuestHardening checks what this tier adds beyond the contract: the
// seccomp filter, a read-only sysfs showing only the sandbox's loopback, and
// ids mapped into UIDBase.
func TestGuestHardening(t *testing.T) {
	requiresProcessTier(t)
	rootfs := sandboxtest.BaseRootFS(t)
	rt := newRuntime(t)
	spec := sandbox.Spec{ID: "hardening", RootLayers: []string{rootfs}, WorkspaceHost: t.TempDir()}
	sb, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer sb.Destroy(context.Background())
	var out strings.Builder
	st, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Argv: []string{"/bin/sh", "-c", `grep -E '^Seccomp:' /proc/self/status; cat /proc/self/uid_map
ls /sys/class/net; grep -E ' /sys ' /proc/self/mounts | cut -d' ' -f4 | cut -d, -f1`},
		OnOutput: func(_ string, b []byte) { out.Write(b) },
	})
	got := strings.Fields(out.String())
	want := []string{"Seccomp:", "2", "0", strconv.Itoa(DefaultUIDBase), strconv.Itoa(DefaultUIDCount), "lo", "ro"}
	if err != nil || st.Code != 0 || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("hardening probe = %q, %+v, %v; want %q", got, st, err, want)
	}
}

// TestRefusesBuildSteps: the process tier cannot write image layers with
// their owners, so a writable root or cache mounts are refused up front.
func TestRefusesBuildSteps(t *testing.T) {
	requiresProcessTier(t)
	rt := newRuntime(t)
	layer, tmp := t.TempDir(), t.TempDir()
	for _, spec := range []sandbox.Spec{
		{ID: "build", RootLayers: []string{layer}, RootUpper: filepath.Join(tmp), RootWork: t.TempDir()},
		{ID: "mounts", RootLayers: []string{layer}, WorkspaceHost: t.TempDir(), Mounts: []sandbox.Mount{{Source: t.TempDir(), Dest: "/cache"}}},
	} {
		_, err := rt.Start(context.Background(), spec)
		if !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "use the gvisor tier") {
			t.Errorf("Start(%s) = %v, want ErrInvalidSpec pointing at the gvisor tier", spec.ID, err)
		}
	}
}

// TestRootLayerCharged: what a sandbox writes to its root is a tmpfs of
// its own, charged to its memory cgroup, and removing it gives the memory
// back.
func TestRootLayerCharged(t *testing.T) {
	requiresProcessTier(t)
	rootfs := sandboxtest.BaseRootFS(t)
	rt := newRuntime(t)
	spec := sandbox.Spec{ID: "root-charged", RootLayers: []string{rootfs}, WorkspaceHost: t.TempDir(), MemoryBytes: 512 << 20, RootSizeBytes: 128 << 20}
	sb, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer sb.Destroy(context.Background())
	usage := filepath.Join(sb.(*Sandbox).cg.memory, "memory.usage_in_bytes")
	if sb.(*Sandbox).cg.v2 {
		usage = filepath.Join(sb.(*Sandbox).cg.memory, "memory.current")
	}
	read := func() int64 {
		b, err := os.ReadFile(usage)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return n
	}
	run := func(script string) {
		st, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", script}})
		if err != nil || st.Code != 0 {
			t.Fatalf("Exec(%q) = %+v, %v", script, st, err)
		}
	}
	before := read()
	run("head -c 67108864 /dev/zero > /big")
	written := read()
	run("rm /big")
	removed := read()
	if written-before < 60<<20 || written-removed < 60<<20 {
		t.Errorf("sandbox memory: %d before, %d with 64 MiB in /big, %d once removed; want the 64 MiB charged, then freed", before, written, removed)
	}
}
