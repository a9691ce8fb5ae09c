package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/testenv"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/vault/vaulttest"

	"github.com/jackc/pgx/v5"

	"github.com/helmr/helmr/internal/store/storetest"
)

// countingStore lets the suite count rows in every table.
type countingStore struct{ *Store }

func (s countingStore) CountRows(ctx context.Context, table string) (n int, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n)
	return n, err
}

func openTest(tb testing.TB) storetest.Store {
	tb.Helper()
	u := testenv.PostgresSchema(tb)
	s, err := Open(context.Background(), u, nil)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() }) // registered last, so it runs before the schema is dropped
	return countingStore{s}
}

func TestStoreSuite(t *testing.T) {
	testenv.PostgresURL(t)
	storetest.RunStoreSuite(t, func(t *testing.T) storetest.Store { return openTest(t) })
}

func TestOpenTwiceAndNewerSchema(t *testing.T) {
	ctx := t.Context()
	u := testenv.PostgresSchema(t)
	for range 2 {
		s, err := Open(ctx, u, nil)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		s.Close()
	}
	s, err := Open(ctx, u, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '0999_future.sql', now())`)
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, u, nil)
	if err == nil || !strings.Contains(err.Error(), "newer than this binary") {
		t.Errorf("Open() with schema 999 = %v, want a newer-schema error", err)
	}
}

// BenchmarkStore runs the suite's benchmarks: go test -bench Store.
func BenchmarkStore(b *testing.B) { storetest.RunBenchmarks(b, openTest) }

func TestVaultStore(t *testing.T) {
	testenv.PostgresURL(t)
	vaulttest.Run(t, func(t *testing.T) vault.Store { return openTest(t).(countingStore).Store },
		func(t *testing.T, s vault.Store) []byte {
			// Every stored byte of the vault's tables, as text.
			var dump string
			err := s.(*Store).db.QueryRowContext(t.Context(), `SELECT
				COALESCE((SELECT string_agg(t::text, '|') FROM vault_keys t), '') ||
				COALESCE((SELECT string_agg(encode(ciphertext, 'escape') || t::text, '|') FROM secrets t), '')`).Scan(&dump)
			if err != nil {
				t.Fatal(err)
			}
			return []byte(dump)
		})
}
