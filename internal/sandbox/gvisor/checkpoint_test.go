package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/sandboxtest"
)

// TestCheckpointRestore: a process keeps its in-memory counter across
// Checkpoint and Restore, the worker re-attaches to it over the restored
// agent's new stream, the workspace is as it was, and the agent starts new
// processes after restore.
func TestCheckpointRestore(t *testing.T) {
	rt := newRuntime(t)
	rootfs := sandboxtest.BaseRootFS(t)
	ws := t.TempDir()
	spec := sandbox.Spec{ID: "ckpt", RootLayers: []string{rootfs}, WorkspaceHost: ws, UID: 1000, GID: 1000, MemoryBytes: 512 << 20}
	sb, err := rt.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start() = %v", err)
	}
	defer func() { _ = sb.Destroy(context.Background()) }()

	p := sandboxtest.ExecChannel(sb, sandbox.ExecRequest{Argv: []string{"node", "-e", sandboxtest.CounterJS}})
	s := p.Started(t)
	for i, want := range []string{`{"n":1}`, `{"n":2}`} {
		if got := p.Ask(t, s, `"inc"`); got != want {
			t.Fatalf("answer %d = %s, want %s", i, got, want)
		}
	}
	if r, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo before > note"}}); err != nil || r.Code != 0 {
		t.Fatalf("write note = %+v, %v", r, err)
	}

	image := t.TempDir()
	begin := time.Now()
	if err := rt.Checkpoint(context.Background(), sb, image); err != nil {
		t.Fatalf("Checkpoint() = %v", err)
	}
	t.Logf("checkpoint took %v", time.Since(begin))
	var cerr *sandbox.CheckpointedError
	select {
	case err := <-p.Done:
		if !errors.As(err, &cerr) || !errors.Is(err, sandbox.ErrCheckpointed) {
			t.Fatalf("Exec during Checkpoint = %v, want a CheckpointedError", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Exec still running after Checkpoint")
	}
	if !rt.containerGone(context.Background(), spec.ID) {
		t.Errorf("runsc still has state for %s after Checkpoint", spec.ID)
	}
	if _, err := os.Stat(filepath.Join(image, checkpointFile)); err != nil {
		t.Fatalf("checkpoint image: %v", err)
	}
	if _, err := os.Stat(filepath.Join(rt.cfg.bundles(), spec.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bundle after Checkpoint: %v, want gone", err)
	}

	begin = time.Now()
	restored, err := rt.Restore(context.Background(), spec, image)
	if err != nil {
		t.Fatalf("Restore() = %v", err)
	}
	defer func() { _ = restored.Destroy(context.Background()) }()
	t.Logf("restore took %v", time.Since(begin))

	p2 := sandboxtest.ExecChannel(restored, sandbox.ExecRequest{Argv: []string{"node"}, Attach: cerr.ExecID})
	s2 := p2.Started(t)
	if got := p2.Ask(t, s2, `"inc"`); got != `{"n":3}` {
		t.Errorf("answer after restore = %s, want {\"n\":3}", got)
	}
	r, err := restored.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"cat", "note"}, OnOutput: func(_ string, b []byte) {
		if string(b) != "before\n" {
			t.Errorf("note after restore = %q, want before", b)
		}
	}})
	if err != nil || r.Code != 0 {
		t.Errorf("new exec after restore = %+v, %v", r, err)
	}
	if got := p2.Ask(t, s2, `"exit"`); got != `"bye"` {
		t.Errorf("answer to exit = %s", got)
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

// TestRestoreBadImage: a damaged checkpoint fails Restore with
// ErrGuestRuntime and leaves nothing running.
func TestRestoreBadImage(t *testing.T) {
	rt := newRuntime(t)
	rootfs := sandboxtest.BaseRootFS(t)
	image := t.TempDir()
	if err := os.WriteFile(filepath.Join(image, checkpointFile), []byte(strings.Repeat("x", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	// Digests that match: runsc itself reads the garbage and fails.
	if err := sandbox.WriteImageDigests(image); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{ID: "badimage", RootLayers: []string{rootfs}, WorkspaceHost: t.TempDir()}
	sb, err := rt.Restore(context.Background(), spec, image)
	if err == nil {
		_ = sb.Destroy(context.Background())
		t.Fatal("Restore(garbage image) = nil error")
	}
	if !errors.Is(err, sandbox.ErrGuestRuntime) {
		t.Errorf("Restore(garbage image) = %v, want ErrGuestRuntime", err)
	}
	if !rt.containerGone(context.Background(), spec.ID) {
		t.Errorf("runsc has state for %s after a failed restore", spec.ID)
	}
}
