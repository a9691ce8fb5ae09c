package checkpoints

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/helmr/helmr/internal/errdefs"
)

type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("connection reset")
	}
	f.n--
	return copy(p, "partial"), nil
}

func TestDirBlobs(t *testing.T) {
	ctx := context.Background()
	d, err := NewDirBlobs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("sealed"), 1000)
	if n, err := d.Put(ctx, "ck_1", bytes.NewReader(data)); err != nil || n != int64(len(data)) {
		t.Fatalf("Put() = %d, %v", n, err)
	}
	rc, err := d.Get(ctx, "ck_1")
	if err != nil {
		t.Fatalf("Get() = %v", err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, data) {
		t.Errorf("Get() = %d bytes, want the %d put", len(got), len(data))
	}
	// A failed upload leaves the previous blob, and no partial file.
	if _, err := d.Put(ctx, "ck_1", &failingReader{n: 2}); err == nil {
		t.Error("Put(failing reader) = nil error")
	}
	rc, _ = d.Get(ctx, "ck_1")
	got, _ = io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, data) {
		t.Errorf("after a failed Put, Get() = %d bytes, want the earlier %d", len(got), len(data))
	}
	if entries, _ := os.ReadDir(d.dir); len(entries) != 1 {
		t.Errorf("blob dir holds %d entries after a failed Put, want 1", len(entries))
	}
	for _, bad := range []string{"../etc/passwd", "ck_../x", "run_1", "ck_", "wss_", "wss_A"} {
		if _, err := d.Put(ctx, bad, bytes.NewReader(nil)); err == nil {
			t.Errorf("Put(%q) = nil error", bad)
		}
	}
	if err := d.Delete(ctx, "ck_1"); err != nil {
		t.Fatalf("Delete() = %v", err)
	}
	if _, err := d.Get(ctx, "ck_1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(deleted) = %v, want errdefs.ErrNotFound", err)
	}
	if err := d.Delete(ctx, "ck_1"); err != nil {
		t.Errorf("Delete(deleted) = %v, want nil", err)
	}
}
