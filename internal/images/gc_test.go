package images

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// bigRunner writes a 1 MiB file per step.
type bigRunner struct{ runs int }

func (b *bigRunner) RunStep(_ context.Context, req StepRequest) error {
	b.runs++
	return os.WriteFile(filepath.Join(req.Upper, req.Argv[0]), bytes.Repeat([]byte{'x'}, 1<<20), 0o644)
}

func TestCollectLeastRecentlyUsed(t *testing.T) {
	r := testResolver(t)
	b := &bigRunner{}
	r.Runner, r.CachesDir = b, t.TempDir()
	layerOf := func(step string) string {
		t.Helper()
		got, err := r.Prepare(context.Background(), img(run(step)), nil, PrepareOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.Layers[len(got.Layers)-1]
	}
	a, bl, c := layerOf("a"), layerOf("b"), layerOf("c")
	// Last used two, three and four hours ago: a is the oldest.
	for i, l := range []string{a, bl, c} {
		old := time.Now().Add(-time.Duration(4-i) * time.Hour)
		os.Chtimes(filepath.Join(r.LayersDir, usedDir, filepath.Base(l)), old, old)
	}
	stale := filepath.Join(r.LayersDir, ".build-interrupted")
	os.MkdirAll(stale, 0o755)
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(stale, old, old)

	st, err := r.Collect(3<<19, []string{bl}, time.Hour) // room for one and a half layers; b is in use
	if err != nil {
		t.Fatal(err)
	}
	for l, want := range map[string]bool{a: false, bl: true, c: false} {
		if _, err := os.Stat(l); (err == nil) != want {
			t.Errorf("after collection %s exists = %v, want %v (stats %+v)", filepath.Base(l), err == nil, want, st)
		}
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("an interrupted build's leftovers survived")
	}
	if st.Removed != 3 || st.Kept != 1 {
		t.Errorf("stats = %+v, want 3 removed (a, c, the leftovers), 1 kept", st)
	}
	// A layer used within the grace period stays, however small the bound.
	fresh := layerOf("d")
	if _, err := r.Collect(1, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("a layer used just now was collected: %v", err)
	}
	// A collected layer is simply built again.
	runs := b.runs
	if layerOf("a") != a || b.runs != runs+1 {
		t.Errorf("rebuilding a collected layer: %d runs, want %d", b.runs, runs+1)
	}
	// No bound: nothing goes.
	if st, _ := r.Collect(0, nil, 0); st.Removed != 0 {
		t.Errorf("Collect without a bound removed %d", st.Removed)
	}
}
