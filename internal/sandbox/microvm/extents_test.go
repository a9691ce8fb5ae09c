package microvm

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestExtentsRoundTrip keeps a sparse image's data and size, writes
// nothing for its holes, and replaces what the target held before.
func TestExtentsRoundTrip(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "disk.img")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	chunks := map[int64][]byte{0: bytes.Repeat([]byte("a"), 4096), 5 << 20: bytes.Repeat([]byte("b"), 12288), size - 4096: bytes.Repeat([]byte("z"), 4096)}
	for off, data := range chunks {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	ext := filepath.Join(dir, "disk.extents")
	if err := writeExtents(ext, src); err != nil {
		t.Fatalf("writeExtents() = %v", err)
	}
	if fi, err := os.Stat(ext); err != nil || fi.Size() > 1<<20 {
		t.Errorf("extents file of a 64 MiB disk holding 20 KiB: %v bytes (%v), want well under 1 MiB", fi.Size(), err)
	}
	dst := filepath.Join(dir, "restored.img")
	// What the target held must not show through the holes.
	if err := os.WriteFile(dst, bytes.Repeat([]byte("x"), 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := readExtents(dst, ext)
	if err != nil || n != size {
		t.Fatalf("readExtents() = %d, %v; want %d", n, err, size)
	}
	want, _ := os.ReadFile(src)
	got, _ := os.ReadFile(dst)
	if !bytes.Equal(got, want) {
		t.Error("restored image differs from the original")
	}
}

func TestExtentsRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	img := filepath.Join(dir, "img")
	if err := os.WriteFile(img, bytes.Repeat([]byte("d"), 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeExtents(good, img); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(good)
	hdr := len(extentsMagic) + 8
	past := append([]byte(nil), b...)
	past[hdr+15] = 0xff // the extent's length past the disk
	for name, data := range map[string][]byte{
		"not extents":    []byte("hello"),
		"cut short":      b[:len(b)-4],
		"extent too big": past,
		"trailing data":  append(append([]byte(nil), b...), 1),
	} {
		p := filepath.Join(dir, "bad")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readExtents(filepath.Join(dir, "out"), p); err == nil {
			t.Errorf("readExtents(%s) = nil, want an error", name)
		}
	}
}

// TestBootSnapshotsPrune keeps the most recently used snapshots only.
func TestBootSnapshotsPrune(t *testing.T) {
	dir := t.TempDir()
	b := &bootSnapshots{dir: dir, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	base := time.Now().Add(-time.Hour)
	for i := range maxBootSnapshots + 3 {
		p := filepath.Join(dir, fmt.Sprintf("s%02d.state", i))
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		at := base.Add(time.Duration(i) * time.Minute)
		if i == 0 {
			at = base.Add(2 * time.Hour) // the oldest, used last
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	b.prune()
	left, _ := filepath.Glob(filepath.Join(dir, "*.state"))
	if len(left) != maxBootSnapshots {
		t.Fatalf("%d snapshots left, want %d", len(left), maxBootSnapshots)
	}
	for _, gone := range []string{"s01.state", "s02.state", "s03.state"} {
		if _, err := os.Stat(filepath.Join(dir, gone)); err == nil {
			t.Errorf("%s (least recently used) kept", gone)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "s00.state")); err != nil {
		t.Errorf("s00.state (used last) removed: %v", err)
	}
}
