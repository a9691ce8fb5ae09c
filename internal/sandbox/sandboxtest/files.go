package sandboxtest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
)

// testWriteFile: the runtime places a run's secret files as declared
// (owner, mode, parents), the task's user reads them, a file it could not
// read is an error rather than a loosened mode, and no path goes through
// a symlink.
func testWriteFile(t *testing.T, rt sandbox.Runtime, rootfs string) {
	f := start(t, rt, rootfs, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reader := &[2]uint32{testUID, testUID}
	place := func(file sandbox.File) error { t.Helper(); return f.SB.WriteFile(ctx, file) }
	if err := place(sandbox.File{Path: "/run/secrets/api/token", Data: []byte("tok-123"), Mode: 0o400, UID: testUID, GID: testUID, Reader: reader}); err != nil {
		t.Fatalf("place a readable file: %v", err)
	}
	if err := place(sandbox.File{Path: "/run/secrets/certs", Dir: true, Mode: 0o500, UID: testUID, GID: testUID, Reader: reader}); err != nil {
		t.Fatalf("place a directory: %v", err)
	}
	if err := place(sandbox.File{Path: "/run/secrets/certs/ca.pem", Data: []byte("pem"), Mode: 0o440, UID: 0, GID: testUID, Reader: reader}); err != nil {
		t.Fatalf("place a group-readable file: %v", err)
	}
	if err := place(sandbox.File{Path: f.Spec.Workspace + "/.config/tool.json", Data: []byte("{}"), Mode: 0o600, UID: testUID, GID: testUID, Reader: reader}); err != nil {
		t.Fatalf("place a file in the workspace: %v", err)
	}
	got := f.OK(t, "sh", "-c", `cat /run/secrets/api/token; echo; stat -c '%a %u:%g' /run/secrets/api/token /run/secrets/certs /run/secrets/certs/ca.pem; cat /run/secrets/certs/ca.pem; echo; ls -A `+f.Spec.Workspace+`/.config`)
	want := "tok-123\n400 1000:1000\n500 1000:1000\n440 0:1000\npem\ntool.json\n"
	if got != want {
		t.Errorf("the task sees:\n%s\nwant:\n%s", got, want)
	}
	// Root-only: not loosened, an error that says why.
	err := place(sandbox.File{Path: "/run/secrets/root-only", Data: []byte("x"), Mode: 0o400, UID: 0, GID: 0, Reader: reader})
	if err == nil || !strings.Contains(err.Error(), "cannot read /run/secrets/root-only") {
		t.Errorf("a file the task's user cannot read = %v, want an error saying so", err)
	}
	if out := f.OK(t, "stat", "-c", "%a", "/run/secrets/root-only"); out != "400\n" {
		t.Errorf("the unreadable file's mode became %q; it must not be loosened", out)
	}
	// A symlink the sandbox made does not lead the runtime elsewhere.
	f.OK(t, "ln", "-s", "/etc", f.Spec.Workspace+"/link")
	if err := place(sandbox.File{Path: f.Spec.Workspace + "/link/planted", Data: []byte("x"), Mode: 0o644}); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("a path through a symlink = %v, want refused", err)
	}
	if r := f.Exec(t, "test", "-e", "/etc/planted"); r.Status.Code == 0 {
		t.Error("a file was planted through the symlink")
	}
	if _, err := os.Stat(filepath.Join(f.Workspace, "link", "planted")); err == nil {
		t.Error("a file was planted on the host through the symlink")
	}
	for _, bad := range []string{"relative", "/run/../etc/x", "/"} {
		if err := place(sandbox.File{Path: bad, Data: []byte("x"), Mode: 0o644}); err == nil {
			t.Errorf("path %q accepted", bad)
		}
	}
}
