// Package sqlite is the embedded storage engine: runs.Store,
// deployments.Store and workers.Store over one SQLite file
// (modernc.org/sqlite, no cgo).
//
// Writes go through a pool of one connection whose transactions begin
// IMMEDIATE, so writers queue in Go instead of failing or deadlocking on
// SQLite's lock upgrade; reads use a separate pool and, in WAL mode, never
// wait for the writer.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/store"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Store is a SQLite-backed runs.Store, deployments.Store and workers.Store.
type Store struct {
	w   *sql.DB // one connection; every transaction is BEGIN IMMEDIATE
	r   *sql.DB // read-only connections
	log *slog.Logger
}

// Open opens (creating if needed) the database file at path and applies
// pending migrations. It refuses a database whose schema is newer than this
// binary knows. path must name a file: the read and write pools share it.
func Open(ctx context.Context, path string, logger *slog.Logger) (*Store, error) {
	if path == "" || path == ":memory:" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("open sqlite %q: path must name a file", path)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxIdleTime(0)
	w.SetConnMaxLifetime(0)
	s := &Store{w: w, log: logger}
	if err := s.migrate(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	n := max(4, runtime.NumCPU())
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	s.r = r
	return s, nil
}

// dsn returns the modernc.org/sqlite data source name for path.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
	}
	return path + "?" + q.Encode()
}

// Close closes both connection pools.
func (s *Store) Close() error {
	var errs []error
	if s.r != nil {
		errs = append(errs, s.r.Close())
	}
	errs = append(errs, s.w.Close())
	return errors.Join(errs...)
}

// migrate applies the embedded migrations the database lacks, all in one
// transaction.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := store.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		return err
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var current int
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		pending, err := store.Pending(ms, current)
		if err != nil {
			return err
		}
		for _, m := range pending {
			if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %s: %w", m.Name, err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, fmtTime(time.Now())); err != nil {
				return fmt.Errorf("record migration %s: %w", m.Name, err)
			}
			s.log.Info("applied migration", "engine", "sqlite", "migration", m.Name)
		}
		return nil
	})
}

// write runs fn in an IMMEDIATE transaction on the writer connection and
// commits it when fn returns nil.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// timeFormat is fixed-width UTC with microseconds, so stored times sort as text.
const timeFormat = "2006-01-02T15:04:05.000000Z"

func fmtTime(t time.Time) string { return store.Time(t).Format(timeFormat) }

func fmtTimePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return fmtTime(*t)
}

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeFormat, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse stored time %q: %w", s, err)
	}
	return t.UTC(), nil
}

func parseTimePtr(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := parseTime(s.String)
	return &t, err
}

// nullText maps empty JSON or strings to NULL.
func nullText[T ~string | ~[]byte](v T) any {
	if len(v) == 0 {
		return nil
	}
	return string(v)
}
