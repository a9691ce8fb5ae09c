package images

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/testenv"
)

// overlayRunner writes what a real step would leave in its upper layer: a
// new file, a deleted file (whiteout) and a replaced directory (opaque).
type overlayRunner struct{}

func (overlayRunner) RunStep(_ context.Context, req StepRequest) error {
	for _, d := range []string{"app", "etc", "usr/bin"} {
		if err := os.MkdirAll(filepath.Join(req.Upper, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(req.Upper, "app/hello"), []byte("hi\n"), 0o755); err != nil {
		return err
	}
	if err := os.Chown(filepath.Join(req.Upper, "app/hello"), 1000, 1001); err != nil {
		return err
	}
	if err := unix.Mknod(filepath.Join(req.Upper, "usr/bin/node"), unix.S_IFCHR, 0); err != nil {
		return err
	}
	if err := unix.Setxattr(filepath.Join(req.Upper, "etc"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(req.Upper, "etc/only"), []byte("replaced\n"), 0o644)
}

func TestExportRoundTrip(t *testing.T) {
	testenv.RequireRoot(t)
	r := testResolver(t)
	r.Runner, r.CachesDir, r.ImagesDir = overlayRunner{}, t.TempDir(), t.TempDir()
	built, err := r.Prepare(context.Background(), img(run("step"), deployments.Step{Kind: "env", Key: "MODE", Value: "exported"},
		deployments.Step{Kind: "workdir", Path: "/app"}), nil, PrepareOptions{Scope: "p"})
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got Image) {
		t.Helper()
		for p, want := range map[string]bool{"/app/hello": true, "/usr/bin/node": false, "/etc/passwd": false, "/etc/only": true} {
			if _, ok := got.Lookup(p); ok != want {
				t.Errorf("%s: Lookup(%s) = %v, want %v", what, p, ok, want)
			}
		}
		if p, ok := got.Lookup("/app/hello"); ok {
			var st syscall.Stat_t
			if err := syscall.Stat(p, &st); err != nil || st.Uid != 1000 || st.Gid != 1001 || st.Mode&0o777 != 0o755 {
				t.Errorf("%s: /app/hello %d:%d %o (%v), want 1000:1001 0755", what, st.Uid, st.Gid, st.Mode&0o777, err)
			}
		}
	}
	check("built", built)
	if err := ExportOCI(built, filepath.Join(r.ImagesDir, "exported")); err != nil {
		t.Fatal(err)
	}
	back, err := r.Prepare(context.Background(), &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: "oci:exported"}}}, nil, PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check("imported", back)
	if back.Workdir != "/app" || !slices.Contains(back.Env, "MODE=exported") {
		t.Errorf("imported config: workdir %q env %v", back.Workdir, back.Env)
	}
	if err := ExportOCI(built, filepath.Join(r.ImagesDir, "exported")); err == nil {
		t.Error("export over an existing directory succeeded")
	}

	// The same root as an ext4 image.
	ext4 := filepath.Join(t.TempDir(), "root.ext4")
	if err := WriteExt4(built, ext4); err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	d, err := disk.Mount(ext4, mnt, true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if b, err := os.ReadFile(filepath.Join(mnt, "app/hello")); err != nil || string(b) != "hi\n" {
		t.Errorf("ext4 /app/hello = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "usr/bin/node")); err == nil {
		t.Error("ext4 image holds a file the step deleted")
	}
}
