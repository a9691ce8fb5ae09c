package worker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// fakeSnapshots keeps workspace snapshots in memory, each one having to
// follow the latest, as the control plane does.
type fakeSnapshots struct {
	mu     sync.Mutex
	latest map[string]workspaces.Snapshot
	blobs  map[string][]byte
}

func newFakeSnapshots() *fakeSnapshots {
	return &fakeSnapshots{latest: map[string]workspaces.Snapshot{}, blobs: map[string][]byte{}}
}

func (f *fakeSnapshots) put(ws string, seq int64, r io.Reader) (workspaces.Snapshot, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return workspaces.Snapshot{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur := f.latest[ws].Seq; seq != cur+1 {
		return workspaces.Snapshot{}, fmt.Errorf("snapshot %d after %d: %w", seq, cur, errdefs.ErrConflict)
	}
	s := workspaces.Snapshot{Seq: seq, BlobID: fmt.Sprintf("wss_%d", seq), Size: int64(len(data)), CreatedAt: time.Now()}
	f.latest[ws], f.blobs[ws] = s, data
	return s, nil
}

func (f *fakeSnapshots) get(ws string, seq int64) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.latest[ws].Seq != seq {
		return nil, fmt.Errorf("snapshot %d is not the latest: %w", seq, errdefs.ErrConflict)
	}
	return io.NopCloser(bytes.NewReader(f.blobs[ws])), nil
}

// workspace is ws as the control plane would hand it out now.
func (f *fakeSnapshots) workspace(id string) workspaces.Workspace {
	f.mu.Lock()
	defer f.mu.Unlock()
	ws := workspaces.Workspace{ID: id}
	if s, ok := f.latest[id]; ok {
		ws.Snapshot = &s
	}
	return ws
}

// TestStale is the rule that keeps an older copy from standing in for a
// newer snapshot.
func TestStale(t *testing.T) {
	snap := &workspaces.Snapshot{Seq: 3}
	for _, c := range []struct {
		name  string
		held  bool
		local localCopy
		snap  *workspaces.Snapshot
		want  bool
	}{
		{"no snapshot, no copy", false, localCopy{}, nil, false},
		{"no snapshot, a copy", true, localCopy{}, nil, false},
		{"a snapshot, no copy", false, localCopy{}, snap, true},
		{"a snapshot, a record but no files", false, localCopy{Seq: 3, Saved: true}, snap, true},
		{"a copy of an older snapshot", true, localCopy{Seq: 2, Saved: true}, snap, true},
		{"a copy of no snapshot", true, localCopy{}, snap, true},
		{"a copy of that snapshot", true, localCopy{Seq: 3, Saved: true}, snap, false},
		{"a copy changed since that snapshot", true, localCopy{Seq: 3}, snap, false},
		{"a copy of a newer snapshot", true, localCopy{Seq: 4}, snap, false},
	} {
		if got := stale(c.held, c.local, c.snap); got != c.want {
			t.Errorf("stale(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSnapshotDirRoundTrip: a directory workspace comes back with its
// files, directories, links, modes, owners and modification times.
func TestSnapshotDirRoundTrip(t *testing.T) {
	src := filepath.Join(t.TempDir(), "ws")
	mtime := time.Date(2024, 3, 1, 12, 0, 0, 123456789, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "sub", "deep"), 0o755))
	must(os.WriteFile(filepath.Join(src, "notes.txt"), []byte("one\n"), 0o644))
	must(os.WriteFile(filepath.Join(src, "sub", "run.sh"), []byte("#!/bin/sh\n"), 0o750))
	must(os.WriteFile(filepath.Join(src, "sub", "deep", "empty"), nil, 0o600))
	must(os.Symlink("../notes.txt", filepath.Join(src, "sub", "rel")))
	must(os.Symlink("/etc", filepath.Join(src, "out")))
	must(os.Chmod(filepath.Join(src, "sub"), 0o710))
	must(os.Chtimes(filepath.Join(src, "notes.txt"), mtime, mtime))
	root := os.Geteuid() == 0
	if root {
		must(os.Lchown(filepath.Join(src, "sub", "run.sh"), 1234, 5678))
		must(os.Lchown(filepath.Join(src, "out"), 1234, 1234))
	}
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, "ws_1", src); err != nil {
		t.Fatalf("writeSnapshot() = %v", err)
	}
	stage := t.TempDir()
	got, err := readSnapshot(bytes.NewReader(buf.Bytes()), "ws_1", stage)
	if err != nil || got != filepath.Join(stage, "files") {
		t.Fatalf("readSnapshot() = %q, %v", got, err)
	}
	if _, err := readSnapshot(bytes.NewReader(buf.Bytes()), "ws_2", t.TempDir()); err == nil {
		t.Error("readSnapshot(another workspace's snapshot) = nil error")
	}
	for _, rel := range []string{".", "notes.txt", "sub", "sub/run.sh", "sub/deep", "sub/deep/empty", "sub/rel", "out"} {
		a, errA := os.Lstat(filepath.Join(src, rel))
		b, errB := os.Lstat(filepath.Join(got, rel))
		if errA != nil || errB != nil {
			t.Errorf("%s: %v, %v", rel, errA, errB)
			continue
		}
		if a.Mode() != b.Mode() {
			t.Errorf("%s mode = %v, want %v", rel, b.Mode(), a.Mode())
		}
		if root && (owner(a) != owner(b)) {
			t.Errorf("%s owner = %s, want %s", rel, owner(b), owner(a))
		}
		if a.Mode().IsRegular() {
			da, _ := os.ReadFile(filepath.Join(src, rel))
			db, _ := os.ReadFile(filepath.Join(got, rel))
			if !bytes.Equal(da, db) || !a.ModTime().Equal(b.ModTime()) {
				t.Errorf("%s = %q at %v, want %q at %v", rel, db, b.ModTime(), da, a.ModTime())
			}
		}
		if a.Mode()&os.ModeSymlink != 0 {
			la, _ := os.Readlink(filepath.Join(src, rel))
			lb, _ := os.Readlink(filepath.Join(got, rel))
			if la != lb {
				t.Errorf("link %s -> %q, want %q", rel, lb, la)
			}
		}
	}
}

// TestSnapshotTreeStaysInside: however an archive names its entries or
// links, nothing is written outside the directory it is unpacked into.
func TestSnapshotTreeStaysInside(t *testing.T) {
	outside := t.TempDir()
	for _, c := range []struct {
		name    string
		entries []*tar.Header
	}{
		{"through a link", []*tar.Header{
			{Name: "files/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "files/link", Typeflag: tar.TypeSymlink, Linkname: outside},
			{Name: "files/link/pwned", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5},
		}},
		{"through a relative link", []*tar.Header{
			{Name: "files/up", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../../.." + outside},
			{Name: "files/up/pwned", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5},
		}},
		{"a device", []*tar.Header{
			{Name: "files/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
		}},
	} {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		_ = addBytes(tw, snapshotManifestName, []byte(`{"workspace":"ws_1","kind":"dir"}`))
		for _, h := range c.entries {
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			if h.Size > 0 {
				_, _ = tw.Write([]byte("evil!"))
			}
		}
		tw.Close()
		gz.Close()
		_, err := readSnapshot(&buf, "ws_1", t.TempDir())
		if err == nil {
			t.Errorf("readSnapshot(%s) = nil error", c.name)
		}
		t.Logf("readSnapshot(%s) = %v", c.name, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("unpacking wrote outside its directory: %v", ents)
	}
	// A name climbing out is read as a name inside.
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	_ = addBytes(tw, snapshotManifestName, []byte(`{"workspace":"ws_1","kind":"dir"}`))
	_ = addBytes(tw, "files/../../escaped", []byte("x"))
	tw.Close()
	gz.Close()
	stage := t.TempDir()
	got, err := readSnapshot(&buf, "ws_1", stage)
	if err != nil {
		t.Fatalf("readSnapshot(climbing name) = %v", err)
	}
	if _, err := os.Stat(filepath.Join(got, "escaped")); err != nil {
		t.Errorf("climbing name not kept inside: %v", err)
	}
}

// TestWorkspaceMovesBetweenWorkers: a workspace saved on one worker is
// restored on another that has no copy; that one's next snapshot is
// restored on the first, whose older copy is not used; an unchanged
// workspace is not uploaded again; a damaged snapshot or one sealed under
// another key fails and leaves the local copy as it was.
func TestWorkspaceMovesBetweenWorkers(t *testing.T) {
	old := racyWindow
	racyWindow = 0 // the files are written just before each save
	t.Cleanup(func() { racyWindow = old })
	snaps := newFakeSnapshots()
	key := checkpoints.Key{1, 2, 3}
	newWorker := func(key checkpoints.Key) *Worker {
		w := newTestWorker(t, &fakeRuntime{}, &fakeControl{snaps: snaps})
		w.cfg.CheckpointKey = &key
		return w
	}
	a, b := newWorker(key), newWorker(key)
	const ws = "ws_moving"
	write := func(w *Worker, name, data string) {
		t.Helper()
		if err := os.MkdirAll(w.WorkspaceDir(ws), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(w.WorkspaceDir(ws), name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(w *Worker, name string) string {
		data, _ := os.ReadFile(filepath.Join(w.WorkspaceDir(ws), name))
		return string(data)
	}
	save := func(w *Worker) *workspaces.Snapshot {
		t.Helper()
		snap, msg, err := w.saveWorkspace(t.Context(), ws)
		if err != nil {
			t.Fatalf("saveWorkspace() = %v", err)
		}
		t.Log(msg)
		return snap
	}
	write(a, "notes.txt", "one\n")
	if s := save(a); s == nil || s.Seq != 1 {
		t.Fatalf("first save = %+v, want snapshot 1", s)
	}
	if bytes.Contains(snaps.blobs[ws], []byte("one\n")) {
		t.Error("the snapshot blob holds the file in the clear")
	}
	if s := save(a); s != nil {
		t.Errorf("saving an unchanged workspace = %+v, want no upload", s)
	}
	if msg, err := a.fetchWorkspace(t.Context(), snaps.workspace(ws)); err != nil || msg != "" {
		t.Errorf("fetch on the worker that saved it = %q, %v; want its own copy used", msg, err)
	}

	// b has no copy: it restores snapshot 1, then saves its change as 2.
	msg, err := b.fetchWorkspace(t.Context(), snaps.workspace(ws))
	if err != nil || !strings.Contains(msg, "restored from snapshot 1") || read(b, "notes.txt") != "one\n" {
		t.Fatalf("fetch on another worker = %q, %v; notes.txt %q", msg, err, read(b, "notes.txt"))
	}
	write(b, "notes.txt", "one\ntwo\n")
	if s := save(b); s == nil || s.Seq != 2 {
		t.Fatalf("save on the new worker = %+v, want snapshot 2", s)
	}

	// a's copy is of snapshot 1: snapshot 2 replaces it.
	write(a, "stale.txt", "only on a")
	if msg, err := a.fetchWorkspace(t.Context(), snaps.workspace(ws)); err != nil || !strings.Contains(msg, "copy was of snapshot 1") {
		t.Fatalf("fetch on the stale worker = %q, %v", msg, err)
	}
	if read(a, "notes.txt") != "one\ntwo\n" || read(a, "stale.txt") != "" {
		t.Errorf("after the restore a has notes.txt %q, stale.txt %q; want b's notes and no stale file", read(a, "notes.txt"), read(a, "stale.txt"))
	}
	// A stale worker cannot save over the newer snapshot either.
	c := newWorker(key)
	c.writeCopy(ws, localCopy{Seq: 1})
	write(c, "notes.txt", "old\n")
	if _, _, err := c.saveWorkspace(t.Context(), ws); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("save from a copy of snapshot 1 after snapshot 2 = %v, want a conflict", err)
	}

	// Damaged, or sealed under another key: the run fails, c's copy stays.
	snaps.blobs[ws][len(snaps.blobs[ws])/2] ^= 1
	if _, err := c.fetchWorkspace(t.Context(), snaps.workspace(ws)); !errors.Is(err, checkpoints.ErrTampered) {
		t.Errorf("fetch of a damaged snapshot = %v, want ErrTampered", err)
	}
	if read(c, "notes.txt") != "old\n" {
		t.Errorf("after a failed restore notes.txt = %q, want the copy untouched", read(c, "notes.txt"))
	}
	snaps.blobs[ws][len(snaps.blobs[ws])/2] ^= 1
	d := newWorker(checkpoints.Key{9})
	if _, err := d.fetchWorkspace(t.Context(), snaps.workspace(ws)); !errors.Is(err, checkpoints.ErrWrongKey) {
		t.Errorf("fetch under another key = %v, want ErrWrongKey", err)
	}
	if _, err := os.Stat(d.WorkspaceDir(ws)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed restore left files: %v", err)
	}
	snaps.mu.Lock()
	snaps.blobs[ws] = snaps.blobs[ws][:len(snaps.blobs[ws])-10]
	snaps.mu.Unlock()
	if _, err := c.fetchWorkspace(t.Context(), snaps.workspace(ws)); err == nil {
		t.Error("fetch of a truncated snapshot = nil error")
	}
	// Without a key a worker cannot restore a moved workspace, and says so.
	e := newTestWorker(t, &fakeRuntime{}, &fakeControl{snaps: snaps})
	if _, err := e.fetchWorkspace(t.Context(), snaps.workspace(ws)); err == nil || !strings.Contains(err.Error(), "HELMR_CHECKPOINT_ENCRYPTION_KEY") {
		t.Errorf("fetch without a key = %v, want it to name the missing key", err)
	}
}

func owner(fi os.FileInfo) string {
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid)
}

// TestSnapshotDiskRoundTrip: a workspace disk image comes back byte for
// byte, its holes as holes, and its archive holds only its data,
// compressed.
func TestSnapshotDiskRoundTrip(t *testing.T) {
	dir := t.TempDir()
	img := filepath.Join(dir, "ws_1.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for i, off := range []int64{0, 4096 * 3, 32 << 20} {
		if _, err := f.WriteAt(bytes.Repeat([]byte{byte(i + 1)}, 64<<10), off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, "ws_1", img); err != nil {
		t.Fatalf("writeSnapshot() = %v", err)
	}
	if buf.Len() > 16<<10 {
		t.Errorf("snapshot of a sparse 64 MiB image with 192 KiB of data is %d bytes", buf.Len())
	}
	stage := t.TempDir()
	got, err := readSnapshot(&buf, "ws_1", stage)
	if err != nil || got != filepath.Join(stage, "ws.img") {
		t.Fatalf("readSnapshot() = %q, %v", got, err)
	}
	a, _ := os.ReadFile(img)
	b, _ := os.ReadFile(got)
	if !bytes.Equal(a, b) {
		t.Error("restored image differs from the original")
	}
	var st syscall.Stat_t
	if err := syscall.Stat(got, &st); err != nil || st.Blocks*512 > 1<<20 {
		t.Errorf("restored image allocates %d bytes (%v): its holes were filled", st.Blocks*512, err)
	}
}

// TestSweepDropsMovedCopies: a worker removes its copy of a workspace
// that moved to another host once it was saved KeepMoved ago, if the copy
// is unchanged since it was saved; a copy with unsaved changes, a copy
// used while the control plane answered, and a recent one (KeepMoved not
// over) stay.
func TestSweepDropsMovedCopies(t *testing.T) {
	old := racyWindow
	racyWindow = 0 // the files are written just before each save
	t.Cleanup(func() { racyWindow = old })
	ctl := &fakeControl{snaps: newFakeSnapshots()}
	w := newTestWorker(t, &fakeRuntime{}, ctl)
	w.cfg.CheckpointKey = &checkpoints.Key{4}
	write := func(ws, data string) {
		t.Helper()
		if err := os.MkdirAll(w.WorkspaceDir(ws), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(w.WorkspaceDir(ws), "f.txt"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	saved := func(ws string) {
		t.Helper()
		write(ws, "saved")
		if snap, _, err := w.saveWorkspace(t.Context(), ws); err != nil || snap == nil {
			t.Fatalf("save %s = %+v, %v", ws, snap, err)
		}
	}
	has := func(ws string) bool { return w.existingWorkspace(ws) != "" }

	saved("ws_clean")
	saved("ws_changed")
	write("ws_changed", "changed after its snapshot")
	saved("ws_used")
	saved("ws_local") // not moved: never dropped
	// Saved right after a write: no fingerprint, so only "no run or
	// operation had it since" tells the copy is its snapshot.
	racyWindow = time.Hour
	saved("ws_racy")
	saved("ws_racy_used")
	racyWindow = 0
	if c := w.readCopy("ws_racy"); c.Fingerprint != "" || !c.Saved {
		t.Fatalf("a save right after a write recorded %+v, want no fingerprint", c)
	}
	w.markUsed("ws_racy_used") // a run that stopped with its worker, say
	ctl.moved = []string{"ws_clean", "ws_changed", "ws_racy", "ws_racy_used"}

	w.cfg.KeepMoved = time.Hour
	w.sweepWorkspaces()
	if !has("ws_clean") || !has("ws_changed") || !has("ws_racy") {
		t.Fatalf("within KeepMoved the sweep removed a moved copy: clean %v, changed %v, racy %v", has("ws_clean"), has("ws_changed"), has("ws_racy"))
	}
	w.cfg.KeepMoved = 0
	w.sweepWorkspaces()
	if has("ws_clean") {
		t.Error("the unchanged copy of a moved workspace is still there")
	}
	if _, err := os.Stat(w.copyFile("ws_clean")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its record is still there: %v", err)
	}
	if !has("ws_changed") || !has("ws_racy_used") || !has("ws_local") {
		t.Errorf("the sweep removed a copy with unsaved changes (%v), one used since its save (%v) or one that did not move (%v)",
			!has("ws_changed"), !has("ws_racy_used"), !has("ws_local"))
	}
	if has("ws_racy") {
		t.Error("the copy of a moved workspace saved without a fingerprint, and not used since, is still there")
	}
	// Used (saved again) after the control plane was asked: left alone.
	was := w.readCopy("ws_used")
	write("ws_used", "newer")
	if snap, _, err := w.saveWorkspace(t.Context(), "ws_used"); err != nil || snap == nil {
		t.Fatal(err)
	}
	w.dropMoved(t.Context(), "ws_used", was)
	if !has("ws_used") {
		t.Error("dropMoved removed a copy saved since the control plane said it moved")
	}
	w.dropMoved(t.Context(), "ws_used", w.readCopy("ws_used"))
	if has("ws_used") {
		t.Error("dropMoved kept an unchanged copy it was asked about")
	}
}
