package store

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

func TestNewIDSortsByTime(t *testing.T) {
	a := NewID(RunPrefix)
	time.Sleep(2 * time.Millisecond) // IDs are ordered across milliseconds only
	b := NewID(RunPrefix)
	if !strings.HasPrefix(a, RunPrefix) || len(a) != len(RunPrefix)+26 {
		t.Fatalf("NewID(%q) = %q, want %q and 26 characters", RunPrefix, a, RunPrefix)
	}
	if a >= b {
		t.Errorf("NewID() = %q then %q, want increasing", a, b)
	}
}

func TestCursorRoundTrip(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC)
	gotT, gotID, err := DecodeCursor(EncodeCursor(at, "run_x"))
	if err != nil || !gotT.Equal(at) || gotID != "run_x" {
		t.Errorf("DecodeCursor(EncodeCursor(%v, %q)) = %v, %q, %v", at, "run_x", gotT, gotID, err)
	}
	for _, bad := range []string{"!", "e30", "bm90anNvbg"} {
		if _, _, err := DecodeCursor(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("DecodeCursor(%q) error = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestLoadMigrations(t *testing.T) {
	tests := []struct {
		name    string
		files   []string
		wantErr bool
	}{
		{"ordered", []string{"0002_b.sql", "0001_a.sql"}, false},
		{"gap", []string{"0001_a.sql", "0003_c.sql"}, true},
		{"bad name", []string{"init.sql"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for _, f := range tt.files {
				fsys["m/"+f] = &fstest.MapFile{Data: []byte("select 1;")}
			}
			ms, err := LoadMigrations(fsys, "m")
			if (err != nil) != tt.wantErr {
				t.Fatalf("LoadMigrations(%v) error = %v, want error %v", tt.files, err, tt.wantErr)
			}
			for i, m := range ms {
				if m.Version != i+1 {
					t.Errorf("LoadMigrations(%v)[%d].Version = %d, want %d", tt.files, i, m.Version, i+1)
				}
			}
		})
	}
	if _, err := Pending(make([]Migration, 2), 3); err == nil {
		t.Errorf("Pending(2 migrations, 3) error = nil, want newer-schema error")
	}
}
