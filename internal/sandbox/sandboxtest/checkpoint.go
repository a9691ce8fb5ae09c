package sandboxtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
)

// testCheckpoint is the checkpoint contract, for a tier whose runtime
// implements sandbox.Checkpointer: a sandbox (as the image's root) with a
// process holding state in memory, a file in its own /tmp, files written
// to its root and one in the workspace is checkpointed (the process's
// Exec ends with a CheckpointedError); images changed afterwards are
// refused (ErrTamperedImage) and boot nothing; the untouched image
// restores, on the same runtime and then on a fresh one (as on another
// worker): each time the process re-attaches with its memory, the files
// are there, and new processes start.
func testCheckpoint(t *testing.T, newRuntime func(t *testing.T) sandbox.Runtime, rootfs string) {
	rt := newRuntime(t)
	ckr, ok := rt.(sandbox.Checkpointer)
	if !ok {
		t.Skipf("the %s tier does not checkpoint (no sandbox.Checkpointer)", rt.Name())
	}
	f := start(t, rt, rootfs, func(s *sandbox.Spec) { s.MemoryBytes, s.UID, s.GID = 512<<20, 0, 0 })
	p := ExecChannel(f.SB, sandbox.ExecRequest{Argv: []string{"node", "-e", CounterJS}})
	s := p.Started(t)
	for i, want := range []string{`{"n":1}`, `{"n":2}`} {
		if got := p.Ask(t, s, `"inc"`); got != want {
			t.Fatalf("answer %d = %s, want %s", i, got, want)
		}
	}
	f.OK(t, "sh", "-c", "echo workspace > note && echo guest > /tmp/note && mkdir /myrepo && echo repo > /myrepo/note && echo state > /root/state.json")

	image := t.TempDir()
	if err := ckr.Checkpoint(context.Background(), f.SB, image); err != nil {
		t.Fatalf("Checkpoint() = %v", err)
	}
	var cerr *sandbox.CheckpointedError
	select {
	case err := <-p.Done:
		if !errors.As(err, &cerr) || !errors.Is(err, sandbox.ErrCheckpointed) {
			t.Fatalf("Exec during Checkpoint = %v, want a CheckpointedError", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Exec still running after Checkpoint")
	}

	refuseTampered(t, ckr, f.Spec, image)

	t.Run("SameRuntime", func(t *testing.T) { checkRestored(t, ckr, f, image, cerr.ExecID) })
	t.Run("FreshRuntime", func(t *testing.T) {
		fresh, ok := newRuntime(t).(sandbox.Checkpointer)
		if !ok {
			t.Fatal("a fresh runtime of the same tier is no Checkpointer")
		}
		checkRestored(t, fresh, f, image, cerr.ExecID)
	})
}

// checkRestored restores f's checkpoint image with ckr and checks the
// sandbox: the process cut off by the checkpoint re-attaches with its
// memory, the workspace's, /tmp's and the root's files are there, and new
// processes start. It destroys the restored sandbox before returning.
func checkRestored(t *testing.T, ckr sandbox.Checkpointer, f *fixture, image string, execID uint64) {
	restored, err := ckr.Restore(context.Background(), f.Spec, image)
	if err != nil {
		t.Fatalf("Restore(untouched image) = %v", err)
	}
	defer func() {
		if err := restored.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy(restored) = %v", err)
		}
	}()
	r := &fixture{SB: restored, Spec: f.Spec, Workspace: f.Workspace}
	p2 := ExecChannel(restored, sandbox.ExecRequest{Argv: []string{"node"}, Attach: execID})
	s2 := p2.Started(t)
	if got := p2.Ask(t, s2, `"inc"`); got != `{"n":3}` {
		t.Errorf("answer after restore = %s, want {\"n\":3} (memory kept)", got)
	}
	if got := r.OK(t, "cat", "note", "/tmp/note", "/myrepo/note", "/root/state.json"); got != "workspace\nguest\nrepo\nstate\n" {
		t.Errorf("files after restore = %q, want the workspace's, /tmp's and the root's notes", got)
	}
	r.OK(t, "sh", "-c", "echo after > /root/after-restore") // the root is still writable
	if got := p2.Ask(t, s2, `"exit"`); got != `"bye"` {
		t.Errorf("answer to exit = %s, want \"bye\"", got)
	}
	select {
	case err := <-p2.Done:
		if err != nil || p2.Status.Code != 0 {
			t.Errorf("attached exec = %+v, %v; want exit 0", p2.Status, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("attached exec did not end")
	}
}

// refuseTampered changes the checkpoint image in dir in several ways, each
// undone before the next: Restore must refuse each with an error wrapping
// ErrTamperedImage and ErrGuestRuntime.
func refuseTampered(t *testing.T, ckr sandbox.Checkpointer, spec sandbox.Spec, dir string) {
	t.Helper()
	big := largestFile(t, dir)
	digests := filepath.Join(dir, sandbox.ImageDigestsFile)
	recorded, err := os.ReadFile(digests)
	if err != nil {
		t.Fatalf("checkpoint image without %s: %v", sandbox.ImageDigestsFile, err)
	}
	extra := filepath.Join(dir, "extra.img")
	for _, c := range []struct {
		name         string
		tamper, undo func() error
	}{
		{"a flipped byte", func() error { return flipByte(big) }, func() error { return flipByte(big) }},
		{"an added file", func() error { return os.WriteFile(extra, []byte("x"), 0o600) }, func() error { return os.Remove(extra) }},
		{"no digests", func() error { return os.Remove(digests) }, func() error { return os.WriteFile(digests, recorded, 0o600) }},
	} {
		if err := c.tamper(); err != nil {
			t.Fatal(err)
		}
		sb, err := ckr.Restore(context.Background(), spec, dir)
		if err == nil {
			_ = sb.Destroy(context.Background())
			t.Fatalf("Restore(image with %s) = nil error, want it refused", c.name)
		}
		if !errors.Is(err, sandbox.ErrTamperedImage) || !errors.Is(err, sandbox.ErrGuestRuntime) {
			t.Errorf("Restore(image with %s) = %v, want ErrTamperedImage and ErrGuestRuntime", c.name, err)
		}
		if err := c.undo(); err != nil {
			t.Fatal(err)
		}
	}
}

// largestFile is the biggest file of the image in dir.
func largestFile(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var best string
	var size int64 = -1
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().IsRegular() && fi.Size() > size && e.Name() != sandbox.ImageDigestsFile {
			best, size = filepath.Join(dir, e.Name()), fi.Size()
		}
	}
	if size <= 0 {
		t.Fatalf("checkpoint image %s holds no data", dir)
	}
	return best
}

// flipByte inverts the byte in the middle of file p.
func flipByte(p string) error {
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	b := make([]byte, 1)
	off := fi.Size() / 2
	if _, err := f.ReadAt(b, off); err != nil {
		return err
	}
	b[0] ^= 0xff
	_, err = f.WriteAt(b, off)
	return err
}
