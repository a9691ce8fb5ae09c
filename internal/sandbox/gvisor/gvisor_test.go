package gvisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/sandboxtest"
	"github.com/helmr/helmr/internal/testenv"
)

// agentPath is the helmr-agent built once for this package (TestMain).
var agentPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.MainWithAgent(m, &agentPath)) }

// runscPath is HELMR_RUNSC, else bin/runsc in the Helmr cache, where
// scripts/install-runsc.sh puts it.
func runscPath() string {
	if p := os.Getenv("HELMR_RUNSC"); p != "" {
		return p
	}
	return filepath.Join(testenv.CacheDir(), "bin", "runsc")
}

// requiresGvisor skips (fails on CI) unless root and runsc are available.
func requiresGvisor(t testing.TB) string {
	t.Helper()
	testenv.RequireRoot(t)
	p := runscPath()
	_, err := os.Stat(p)
	testenv.Require(t, err == nil, "runsc not installed: run scripts/install-runsc.sh")
	return p
}

// newRuntime returns a Runtime with its own state directory.
func newRuntime(t testing.TB) *Runtime {
	t.Helper()
	runsc := requiresGvisor(t)
	// runsc's state paths are short (its control socket's path must fit
	// in sockaddr_un), so the state directory is not t.TempDir's.
	state, err := os.MkdirTemp("", "helmr-gvisor-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// runsc keeps the gofers' empty network namespace bound in its
		// root (one per StateDir, reused by a long-lived worker).
		_ = syscall.Unmount(filepath.Join(state, "runsc", "null-netns"), syscall.MNT_DETACH)
		if err := os.RemoveAll(state); err != nil {
			t.Errorf("remove state dir: %v", err)
		}
	})
	rt, err := New(context.Background(), Config{
		RunscPath: runsc,
		AgentPath: agentPath,
		StateDir:  state,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	return rt
}

func TestConformance(t *testing.T) {
	requiresGvisor(t)
	rootfs := sandboxtest.BaseRootFS(t)
	sandboxtest.RunWithOptions(t, func(t *testing.T) sandbox.Runtime { return newRuntime(t) }, rootfs, conformance)
}

// conformance is where this tier differs from the process tier (see the
// package doc and sandboxtest.Options):
//   - task code runs on the Sentry, not as host processes; the Sentry's
//     /proc/self/uid_map is its own identity map;
//   - the process limit is the Sentry's RLIMIT_NPROC, whose refusals the
//     host cannot see.
var conformance = sandboxtest.Options{
	GuestKernel:         true,
	PidsLimitUnreported: true,
}

func TestReservedWorkspace(t *testing.T) {
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

// TestHostSide checks what Start and Destroy leave on the host: the
// workspace given to the sandbox's user, the root overlay, the container's
// cgroup and runsc state while it runs, none of them afterwards.
func TestHostSide(t *testing.T) {
	rt := newRuntime(t)
	rootfs := sandboxtest.BaseRootFS(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "existing"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{ID: "host-side", RootLayers: []string{rootfs, t.TempDir()}, WorkspaceHost: ws, UID: 1000, GID: 1001, MemoryBytes: 512 << 20}
	sb, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer sb.Destroy(context.Background())
	s := sb.(*Sandbox)
	for _, p := range []string{ws, filepath.Join(ws, "existing")} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil || st.Uid != 1000 || st.Gid != 1001 {
			t.Errorf("owner of %s = %d:%d (%v), want 1000:1001", p, st.Uid, st.Gid, err)
		}
	}
	limit := filepath.Join(s.cg.v1, "memory.limit_in_bytes")
	if b, err := os.ReadFile(limit); err != nil || string(b) != "536870912\n" {
		t.Errorf("%s = %q, %v; want 536870912", limit, b, err)
	}
	if !mounted(t, s.bundle.rootfs) {
		t.Errorf("root overlay %s not mounted while running", s.bundle.rootfs)
	}
	if rt.containerGone(context.Background(), spec.ID) {
		t.Errorf("runsc state %s missing while running", spec.ID)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy() = %v", err)
	}
	if mounted(t, s.bundle.rootfs) {
		t.Errorf("root overlay %s still mounted after Destroy", s.bundle.rootfs)
	}
	for _, p := range []string{s.bundle.dir, s.cg.v1} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Destroy, stat %s = %v, want not exist", p, err)
		}
	}
	if !rt.containerGone(context.Background(), spec.ID) {
		t.Errorf("runsc still has state for %s after Destroy", spec.ID)
	}
}

// TestSweep: New deletes a container and bundle a previous runtime with
// the same StateDir left behind.
func TestSweep(t *testing.T) {
	rt := newRuntime(t)
	rootfs := sandboxtest.BaseRootFS(t)
	spec := sandbox.Spec{ID: "left-behind", RootLayers: []string{rootfs}, WorkspaceHost: t.TempDir()}
	sb, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	s := sb.(*Sandbox)
	// A new runtime on the same state, as after a worker restart.
	rt2, err := New(context.Background(), rt.cfg)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	if !rt2.containerGone(context.Background(), spec.ID) {
		t.Errorf("New() left container %s running", spec.ID)
	}
	if _, err := os.Stat(s.bundle.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("New() left bundle %s: %v", s.bundle.dir, err)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Errorf("Destroy() after the sweep = %v", err)
	}
}

// TestCloseUnmounts: a sandbox without a network makes runsc mount a
// null network namespace in its root; Close, once the sandboxes are
// gone, leaves no mount behind, and a sandbox after it starts again.
func TestCloseUnmounts(t *testing.T) {
	rt := newRuntime(t)
	rootfs := sandboxtest.BaseRootFS(t)
	start := func(id string) sandbox.Sandbox {
		sb, err := rt.Start(context.Background(), sandbox.Spec{ID: id, RootLayers: []string{rootfs}, WorkspaceHost: t.TempDir()})
		if err != nil {
			t.Fatalf("Start(%s) = %v", id, err)
		}
		return sb
	}
	null := filepath.Join(rt.cfg.runscRoot(), "null-netns")
	sb := start("closing-1")
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !mounted(t, null) {
		t.Fatalf("runsc left no %s mounted: this runsc does not do what Close undoes", null)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if mounted(t, null) {
		t.Errorf("%s is still mounted after Close", null)
	}
	if err := rt.Close(context.Background()); err != nil {
		t.Errorf("Close() again = %v", err)
	}
	if err := start("closing-2").Destroy(context.Background()); err != nil {
		t.Errorf("a sandbox after Close: %v", err)
	}
	_ = rt.Close(context.Background())
}

// mounted reports whether path is a mountpoint in this mount namespace.
func mounted(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// TestBuildStep: a sandbox with a writable root (an image build step)
// writes its changes, deletions included, into the upper directory and
// nothing else: not the base layer, not the runtime's identity files or
// mountpoints, not its cache mount, which keeps what the step put there.
// The upper directory then serves as a layer of the next sandbox.
func TestBuildStep(t *testing.T) {
	rt := newRuntime(t)
	rootfs := sandboxtest.BaseRootFS(t)
	work := t.TempDir()
	upper, wdir, cache := filepath.Join(work, "upper"), filepath.Join(work, "work"), t.TempDir()
	for _, d := range []string{upper, wdir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	before, err := os.ReadFile(filepath.Join(rootfs, "etc/debian_version"))
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{ID: "build-" + randomID(t), RootLayers: []string{rootfs}, RootUpper: upper, RootWork: wdir,
		Mounts: []sandbox.Mount{{Source: cache, Dest: "/var/cache/helmr-test"}}, Workspace: "/srv/app"}
	sb, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	st, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Argv: []string{"sh", "-c", `set -e
echo built > /etc/built
rm /etc/debian_version
mkdir -p /srv/app && echo v1 > /srv/app/version
chown 1000:1001 /srv/app/version
setpriv --reuid=1000 --regid=1001 --clear-groups id -u > /srv/app/setuid-worked
echo cached > /var/cache/helmr-test/n
echo "10.9.9.9 evil" >> /etc/hosts 2>/dev/null || true`},
		Env: []string{"PATH=/usr/bin:/bin"}, Cwd: "/",
	})
	if err != nil || st.Code != 0 {
		t.Fatalf("build step = %+v, %v", st, err)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	var layer []string
	filepath.WalkDir(upper, func(p string, d os.DirEntry, err error) error {
		if rel, _ := filepath.Rel(upper, p); rel != "." {
			layer = append(layer, rel)
		}
		return nil
	})
	for _, want := range []string{"etc/built", "etc/debian_version", "srv/app/version"} {
		if !slices.Contains(layer, want) {
			t.Errorf("layer %v lacks %s", layer, want)
		}
	}
	for _, p := range layer {
		if strings.HasPrefix(p, "etc/host") || strings.HasPrefix(p, "etc/resolv") || strings.HasPrefix(p, "proc") ||
			strings.HasPrefix(p, "opt/helmr") || strings.HasPrefix(p, "var/cache/helmr-test") {
			t.Errorf("layer holds %s, which belongs to the runtime or the cache mount", p)
		}
	}
	// The step's root had a container's capabilities (inside the Sentry):
	// it could give files away and switch users, as package managers do.
	var own syscall.Stat_t
	if err := syscall.Stat(filepath.Join(upper, "srv/app/version"), &own); err != nil || own.Uid != 1000 || own.Gid != 1001 {
		t.Errorf("chowned file in the layer: %d:%d (%v), want 1000:1001", own.Uid, own.Gid, err)
	}
	if b, err := os.ReadFile(filepath.Join(upper, "srv/app/setuid-worked")); err != nil || string(b) != "1000\n" {
		t.Errorf("setuid in the build step: %q, %v", b, err)
	}
	var wh syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(upper, "etc/debian_version"), &wh); err != nil || wh.Mode&syscall.S_IFMT != syscall.S_IFCHR || wh.Rdev != 0 {
		t.Errorf("deleted file is %+v (%v) in the layer, want an overlay whiteout (char 0/0)", wh, err)
	}
	if after, _ := os.ReadFile(filepath.Join(rootfs, "etc/debian_version")); string(after) != string(before) {
		t.Error("the base layer changed")
	}
	if b, err := os.ReadFile(filepath.Join(cache, "n")); err != nil || string(b) != "cached\n" {
		t.Errorf("cache mount holds %q, %v", b, err)
	}

	// The layer over the base: the next sandbox sees the step's result.
	next, err := rt.Start(context.Background(), sandbox.Spec{ID: "use-" + randomID(t), RootLayers: []string{rootfs, upper}, WorkspaceHost: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer next.Destroy(context.Background())
	var out strings.Builder
	st, err = next.Exec(context.Background(), sandbox.ExecRequest{
		Argv: []string{"sh", "-c", "cat /etc/built /srv/app/version; test -e /etc/debian_version && echo still-there; grep -c evil /etc/hosts || true"},
		Env:  []string{"PATH=/usr/bin:/bin"}, OnOutput: func(_ string, b []byte) { out.Write(b) },
	})
	if err != nil || st.Code != 0 || out.String() != "built\nv1\n0\n" {
		t.Errorf("next sandbox saw %q (%+v, %v), want the step's files, the deletion, and its own /etc/hosts", out.String(), st, err)
	}
}

// TestRootForkBomb: a sandbox running as uid 0, whose tasks share uid 0's
// process count with the agent. The agent holds the cap as its own limit
// (no limit-exec wrapper: /proc/1/limits shows it) and what it starts
// inherits it; a fork bomb meets it; while the bomb's processes hold the
// whole count, the agent, which the Sentry exempts (CAP_SYS_RESOURCE),
// still starts processes, several at once, and those are capped too.
func TestRootForkBomb(t *testing.T) {
	rt := newRuntime(t)
	rootfs := sandboxtest.BaseRootFS(t)
	sb, err := rt.Start(context.Background(), sandbox.Spec{ID: "bomb-" + randomID(t), RootLayers: []string{rootfs}, WorkspaceHost: t.TempDir(), PidsLimit: 64})
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer sb.Destroy(context.Background())
	run := func(script string) (string, sandbox.ExitStatus, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var out strings.Builder
		st, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
			OnOutput: func(_ string, b []byte) { out.Write(b) }})
		return out.String(), st, err
	}
	for _, pid := range []string{"1", "self"} {
		out, st, err := run("grep 'Max processes' /proc/" + pid + "/limits")
		if f := strings.Fields(out); err != nil || st.Code != 0 || len(f) < 4 || f[2] != "64" || f[3] != "64" {
			t.Errorf("/proc/%s/limits: %q (%+v, %v), want max processes 64 64", pid, out, st, err)
		}
	}
	out, st, err := run(`i=0; while [ $i -lt 200 ]; do sleep 60 </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo all-forked`)
	if err != nil || st.Code == 0 || strings.Contains(out, "all-forked") {
		t.Fatalf("fork bomb = %q, %+v, %v; want the shell to fail to fork", out, st, err)
	}
	var wg sync.WaitGroup
	errs := make([]string, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, st, err := run("echo started"); err != nil || st.Code != 0 || out != "started\n" {
				errs[i] = fmt.Sprintf("%q %+v %v", out, st, err)
			}
		}()
	}
	wg.Wait()
	for i, e := range errs {
		if e != "" {
			t.Errorf("exec %d while the bomb holds the count = %s, want it started", i, e)
		}
	}
	if out, st, err := run(`sleep 1 & echo forked`); err != nil || st.Code == 0 || strings.Contains(out, "forked") {
		t.Errorf("a fork by a process started during the bomb = %q, %+v, %v; want it refused", out, st, err)
	}
}

// TestRootLayerOnHost: a sandbox's writable root keeps its data in an
// unlinked file that runsc created in the bundle directory (rootOverlay's
// dir= medium), on the state directory's filesystem rather than in the
// Sentry's memory; nothing of it is left once the sandbox is destroyed.
func TestRootLayerOnHost(t *testing.T) {
	rt := newRuntime(t)
	rootfs := sandboxtest.BaseRootFS(t)
	spec := sandbox.Spec{ID: "root-layer-" + randomID(t), RootLayers: []string{rootfs}, WorkspaceHost: t.TempDir(), RootSizeBytes: 64 << 20}
	sb, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer sb.Destroy(context.Background())
	s := sb.(*Sandbox)
	st, err := sb.Exec(context.Background(), sandbox.ExecRequest{
		Argv: []string{"sh", "-c", "head -c 16777216 /dev/urandom > /big && sync"}, Env: []string{"PATH=/usr/bin:/bin"},
	})
	if err != nil || st.Code != 0 {
		t.Fatalf("write 16 MiB to / = %+v, %v", st, err)
	}
	prefix := filepath.Join(s.bundle.dir, "runsc-filestore-")
	files := openFilesWithPrefix(t, prefix)
	if len(files) != 1 {
		t.Fatalf("open files %s* = %v, want the root layer's one", prefix, files)
	}
	var fst syscall.Stat_t
	if err := syscall.Stat(files[0], &fst); err != nil || fst.Blocks*512 < 16<<20 || fst.Nlink != 0 {
		t.Errorf("root layer file %s: %d bytes allocated, %d links (%v); want at least 16 MiB, unlinked", files[0], fst.Blocks*512, fst.Nlink, err)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy() = %v", err)
	}
	if left := openFilesWithPrefix(t, prefix); len(left) > 0 {
		t.Errorf("after Destroy, root layer files are still open: %v", left)
	}
}

// openFilesWithPrefix lists the files open in host processes whose path
// starts with prefix, one /proc/<pid>/fd/<n> for each (several processes
// of a sandbox share a descriptor).
func openFilesWithPrefix(t *testing.T, prefix string) []string {
	t.Helper()
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	seen := map[[2]uint64]bool{}
	var found []string
	for _, fd := range fds {
		var st syscall.Stat_t
		if target, err := os.Readlink(fd); err != nil || !strings.HasPrefix(target, prefix) || syscall.Stat(fd, &st) != nil {
			continue
		}
		if id := [2]uint64{st.Dev, st.Ino}; !seen[id] {
			seen[id] = true
			found = append(found, fd)
		}
	}
	return found
}
