package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/store/storetest"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/vault/vaulttest"
)

// countingStore lets the suite count rows in every table.
type countingStore struct{ *Store }

func (s countingStore) CountRows(ctx context.Context, table string) (n int, err error) {
	err = s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table).Scan(&n)
	return n, err
}

func openTest(tb testing.TB) storetest.Store {
	tb.Helper()
	s, err := Open(context.Background(), filepath.Join(tb.TempDir(), "helmr.db"), nil)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return countingStore{s}
}

func TestStoreSuite(t *testing.T) {
	storetest.RunStoreSuite(t, func(t *testing.T) storetest.Store { return openTest(t) })
}

func TestOpenTwiceAndNewerSchema(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "helmr.db")
	for range 2 {
		s, err := Open(ctx, path, nil)
		if err != nil {
			t.Fatalf("Open(%q): %v", path, err)
		}
		s.Close()
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '0999_future.sql', '')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = Open(ctx, path, nil)
	if err == nil || !strings.Contains(err.Error(), "newer than this binary") {
		t.Errorf("Open(%q) with schema 999 = %v, want a newer-schema error", path, err)
	}
}

func TestOpenRejectsMemory(t *testing.T) {
	if _, err := Open(t.Context(), ":memory:", nil); err == nil {
		t.Errorf("Open(%q) = nil error, want one", ":memory:")
	}
}

// BenchmarkStore runs the suite's benchmarks: go test -bench Store.
func BenchmarkStore(b *testing.B) { storetest.RunBenchmarks(b, openTest) }

func TestPragmas(t *testing.T) {
	s := openTest(t).(countingStore)
	tests := []struct {
		db     *sql.DB
		pragma string
		want   string
	}{
		{s.w, "journal_mode", "wal"},
		{s.w, "synchronous", "1"}, // NORMAL
		{s.w, "foreign_keys", "1"},
		{s.r, "foreign_keys", "1"},
		{s.r, "query_only", "1"},
		{s.w, "busy_timeout", "10000"},
	}
	for _, tt := range tests {
		var got string
		if err := tt.db.QueryRowContext(t.Context(), "PRAGMA "+tt.pragma).Scan(&got); err != nil || got != tt.want {
			t.Errorf("PRAGMA %s = %q, %v; want %q", tt.pragma, got, err, tt.want)
		}
	}
}

func TestVaultStore(t *testing.T) {
	var paths = map[vault.Store]string{}
	vaulttest.Run(t, func(t *testing.T) vault.Store {
		p := filepath.Join(t.TempDir(), "helmr.db")
		s, err := Open(context.Background(), p, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		paths[s] = p
		return s
	}, func(t *testing.T, s vault.Store) []byte {
		// Every byte SQLite wrote: the database file and its WAL.
		var all []byte
		for _, suffix := range []string{"", "-wal"} {
			b, _ := os.ReadFile(paths[s] + suffix)
			all = append(all, b...)
		}
		if len(all) == 0 {
			t.Fatal("nothing to search: the database files are empty")
		}
		return all
	})
}
