// Package sqlite is the embedded storage engine: the shared SQL layer
// (store.DB) over one SQLite file (modernc.org/sqlite, no cgo).
//
// Writes go through a pool of one connection whose transactions begin
// IMMEDIATE, so writers queue in Go instead of failing or deadlocking on
// SQLite's lock upgrade; reads use a separate pool and, in WAL mode, never
// wait for the writer. The one writer also serializes what PostgreSQL
// serializes with row and advisory locks, so this dialect needs none.
package sqlite

import (
	"context"
	"database/sql"
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

// Store is a SQLite-backed store.DB: runs.Store, deployments.Store,
// workers.Store and the others.
type Store struct {
	*store.DB
	w *sql.DB // one connection; every transaction is BEGIN IMMEDIATE
	r *sql.DB // read-only connections
}

// dialect is SQLite's SQL: ? placeholders, times as fixed-width text,
// tags as a JSON array, no locks beyond the one writer.
var dialect = &store.Dialect{
	Name:     "sqlite",
	Time:     func(t time.Time) any { return t.Format(store.TimeFormat) },
	Tags:     func(tags []string) any { return store.EncodeTags(tags) },
	TagsDest: func(tags *[]string) sql.Scanner { return jsonTags{tags} },
	HasTag:   "EXISTS (SELECT 1 FROM json_each(waitpoints.tags) WHERE json_each.value = ?)",
	Types: store.Types{
		Time: "TEXT", Blob: "BLOB", Real: "REAL", BigInt: "INTEGER",
		Serial:       "INTEGER PRIMARY KEY AUTOINCREMENT",
		Strings:      "TEXT NOT NULL DEFAULT '[]'",
		WithoutRowID: " WITHOUT ROWID",
	},
}

// jsonTags scans stored tags (a JSON array).
type jsonTags struct{ tags *[]string }

func (j jsonTags) Scan(src any) error {
	var s sql.NullString
	if err := s.Scan(src); err != nil {
		return err
	}
	tags, err := store.DecodeTags("", s.String)
	*j.tags = tags
	return err
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
	if err := store.NewDB(w, w, dialect).Migrate(ctx, logger); err != nil {
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
	return &Store{DB: store.NewDB(w, r, dialect), w: w, r: r}, nil
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
	return errors.Join(s.r.Close(), s.w.Close())
}
