package microvm

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/sandbox/sandboxtest"
)

// TestWorkerHandover is what the worker relies on beyond the conformance
// suite (see Runtime.Traits): a file placed under /opt/helmr once the
// guest runs (a run's task, which the host can no longer add to the
// disk) is there for the sandbox's processes and still read-only to its
// root; and a journaled workspace image (a worker's quota disk of 256 MiB
// or more) that the guest wrote is clean once Destroy returns: the host
// mounts it read-only and reads the guest's file.
func TestWorkerHandover(t *testing.T) {
	rt := newRuntime(t)
	if tr := rt.Traits(); !tr.DiskGuest || (rt.Accel() == AccelTCG) != (tr.NoBoundary != "") {
		t.Errorf("Traits() = %+v under %s, want a disk guest, no boundary exactly under TCG", tr, rt.Accel())
	}
	tmp := t.TempDir()
	ws := filepath.Join(tmp, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := disk.Create(filepath.Join(tmp, "ws.img"), ws, 300<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Detach(); err != nil {
		t.Fatal(err)
	}
	helmr := t.TempDir()
	if err := os.Mkdir(filepath.Join(helmr, "runtime"), 0o755); err != nil {
		t.Fatal(err)
	}
	sb, err := rt.Start(context.Background(), sandbox.Spec{ID: "handover", RootLayers: []string{sandboxtest.BaseRootFS(t)},
		WorkspaceImage: d.Image, HelmrHost: helmr, UID: 0, GID: 0, MemoryBytes: 256 << 20, CPU: 1})
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer sb.Destroy(context.Background())
	late := sandbox.File{Path: "/opt/helmr/task/bundles/t.mjs", Data: []byte("export const x = 1;\n"), Mode: 0o644}
	if err := sb.WriteFile(context.Background(), late); err != nil {
		t.Fatalf("WriteFile(%s) = %v", late.Path, err)
	}
	if got := run(t, sb, "cat", late.Path); got != string(late.Data) {
		t.Errorf("cat %s = %q, want %q", late.Path, got, late.Data)
	}
	for _, script := range []string{"echo x > /opt/helmr/task/bundles/t.mjs", "echo x > /opt/helmr/task/y", "rm -f /opt/helmr/task/bundles/t.mjs"} {
		if out := run(t, sb, "sh", "-c", script+" 2>/dev/null && echo written || echo refused"); out != "refused\n" {
			t.Errorf("%q as the sandbox's root: %q, want refused", script, out)
		}
	}
	run(t, sb, "sh", "-c", "echo from-guest > /workspace/kept")
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy() = %v", err)
	}
	ro, err := disk.Mount(d.Image, ws, true)
	if err != nil {
		t.Fatalf("read-only mount of the workspace image after Destroy: %v", err)
	}
	defer ro.Close()
	if b, err := os.ReadFile(filepath.Join(ws, "kept")); err != nil || string(b) != "from-guest\n" {
		t.Errorf("workspace file kept = %q, %v; want the guest's write", b, err)
	}
}
