package worker

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestArchiveRoundTrip: the archive keeps the checkpoint image's files and
// the workspace image byte for byte, and stores a sparse image's holes as
// nothing.
func TestArchiveRoundTrip(t *testing.T) {
	dir := t.TempDir()
	image := filepath.Join(dir, "image")
	if err := os.Mkdir(image, 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"checkpoint.img": bytes.Repeat([]byte("state"), 1000), "pages.img": {1, 2, 3}}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(image, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A 64 MiB sparse workspace image with two small data regions.
	ws := filepath.Join(dir, "ws.img")
	f, err := os.Create(ws)
	if err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{4096, 32 << 20} {
		if _, err := f.WriteAt(bytes.Repeat([]byte{0xab}, 8192), off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()

	var buf bytes.Buffer
	if err := writeArchive(&buf, parkManifest{SandboxID: "sbx_1"}, image, ws); err != nil {
		t.Fatalf("writeArchive() = %v", err)
	}
	if buf.Len() > 256<<10 {
		t.Errorf("archive of a sparse 64 MiB image is %d bytes, want its data only", buf.Len())
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o700); err != nil {
		t.Fatal(err)
	}
	restored := filepath.Join(dir, "restored.img")
	m, err := readArchive(bytes.NewReader(buf.Bytes()), out, restored)
	if err != nil || m.SandboxID != "sbx_1" {
		t.Fatalf("readArchive() = %+v, %v", m, err)
	}
	for name, data := range files {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("restored %s = %d bytes, %v; want %d", name, len(got), err, len(data))
		}
	}
	a, _ := os.Open(ws)
	b, _ := os.Open(restored)
	defer a.Close()
	defer b.Close()
	if fi, _ := b.Stat(); fi.Size() != size {
		t.Fatalf("restored image is %d bytes, want %d", fi.Size(), size)
	}
	if !sameContent(t, a, b) {
		t.Error("restored workspace image differs from the original")
	}
	// An archive cut short is refused.
	if _, err := readArchive(bytes.NewReader(buf.Bytes()[:buf.Len()/2]), t.TempDir(), filepath.Join(dir, "cut.img")); err == nil {
		t.Error("readArchive(truncated) = nil error")
	}
	// A paused workspace's archive holds the checkpoint only: reading it
	// expects no workspace, and an archive with one is refused there (as
	// one without is where a workspace is expected).
	if _, err := readArchive(bytes.NewReader(buf.Bytes()), t.TempDir(), ""); err == nil {
		t.Error("readArchive(with a workspace, none expected) = nil error")
	}
	var only bytes.Buffer
	if err := writeArchive(&only, parkManifest{SandboxID: "sbx_2", CA: []byte("pem")}, image, ""); err != nil {
		t.Fatalf("writeArchive(no workspace) = %v", err)
	}
	out2 := t.TempDir()
	if m, err := readArchive(bytes.NewReader(only.Bytes()), out2, ""); err != nil || m.SandboxID != "sbx_2" || string(m.CA) != "pem" {
		t.Errorf("readArchive(checkpoint only) = %+v, %v", m, err)
	}
	if got, err := os.ReadFile(filepath.Join(out2, "pages.img")); err != nil || !bytes.Equal(got, files["pages.img"]) {
		t.Errorf("checkpoint-only archive's pages.img = %v, %v", got, err)
	}
	if _, err := readArchive(bytes.NewReader(only.Bytes()), t.TempDir(), filepath.Join(dir, "none.img")); err == nil {
		t.Error("readArchive(no workspace, one expected) = nil error")
	}
}

func sameContent(t *testing.T, a, b io.Reader) bool {
	t.Helper()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for {
		na, ea := io.ReadFull(a, ba)
		nb, _ := io.ReadFull(b, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if ea != nil {
			return true
		}
	}
}

// TestArchiveCompressed: writeArchive compresses the tar (a compressible
// checkpoint image shrinks), and readArchive still reads a plain tar, as
// checkpoints parked before archives were compressed are.
func TestArchiveCompressed(t *testing.T) {
	image := t.TempDir()
	pages := bytes.Repeat([]byte("a page of a node heap "), 100_000) // 2.2 MB
	if err := os.WriteFile(filepath.Join(image, "pages.img"), pages, 0o600); err != nil {
		t.Fatal(err)
	}
	m := parkManifest{SandboxID: "sbx_3"}
	var packed, plain bytes.Buffer
	if err := writeArchive(&packed, m, image, ""); err != nil {
		t.Fatalf("writeArchive() = %v", err)
	}
	if err := writeTar(&plain, m, image, ""); err != nil {
		t.Fatalf("writeTar() = %v", err)
	}
	if !bytes.HasPrefix(packed.Bytes(), s2Magic) || packed.Len() > plain.Len()/10 {
		t.Errorf("writeArchive() wrote %d bytes starting %q; want an S2 stream under a tenth of the tar's %d bytes",
			packed.Len(), packed.Bytes()[:min(packed.Len(), 10)], plain.Len())
	}
	for name, a := range map[string][]byte{"compressed": packed.Bytes(), "plain tar": plain.Bytes()} {
		out := t.TempDir()
		got, err := readArchive(bytes.NewReader(a), out, "")
		if err != nil || got.SandboxID != "sbx_3" {
			t.Errorf("readArchive(%s) = %+v, %v", name, got, err)
			continue
		}
		if b, err := os.ReadFile(filepath.Join(out, "pages.img")); err != nil || !bytes.Equal(b, pages) {
			t.Errorf("readArchive(%s): pages.img = %d bytes, %v; want %d", name, len(b), err, len(pages))
		}
	}
	// A compressed archive cut short is refused, not read as complete.
	if _, err := readArchive(bytes.NewReader(packed.Bytes()[:packed.Len()-16]), t.TempDir(), ""); err == nil {
		t.Error("readArchive(compressed, cut short) = nil error")
	}
}
