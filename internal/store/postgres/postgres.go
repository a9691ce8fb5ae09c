// Package postgres is the multi-node storage engine: runs.Store,
// deployments.Store and workers.Store over PostgreSQL (pgx). Leases use
// SELECT … FOR UPDATE SKIP LOCKED, event sequence numbers come from an
// atomic UPDATE … RETURNING of the run's last_seq, and deployment versions
// are assigned under a transaction-scoped advisory lock per project/env.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/helmr/helmr/internal/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Advisory lock classes (the first key of pg_advisory_xact_lock(int, int)).
const (
	lockMigrations  = 0x68656c6d // "helm"
	lockDeployments = 0x68656c6e
)

// Store is a PostgreSQL-backed runs.Store, deployments.Store and workers.Store.
type Store struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	chanOnce sync.Once
	channel  string // see opsChannel
}

// Open connects to the database at url (a postgres:// URL or key=value
// string), applies pending migrations, and refuses a database whose schema
// is newer than this binary knows.
func Open(ctx context.Context, url string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	s := &Store{pool: pool, log: logger}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres %s/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Database, err)
	}
	return s, nil
}

// Close closes the connection pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// migrate applies the embedded migrations the database lacks, in one
// transaction, under an advisory lock so that replicas starting together
// take turns.
func (s *Store) migrate(ctx context.Context) error {
	ms, err := store.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, 0)`, lockMigrations); err != nil {
			return fmt.Errorf("lock migrations: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)`); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		pending, err := store.Pending(ms, current)
		if err != nil {
			return err
		}
		for _, m := range pending {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("migration %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
				m.Version, m.Name, time.Now().UTC()); err != nil {
				return fmt.Errorf("record migration %s: %w", m.Name, err)
			}
			s.log.Info("applied migration", "engine", "postgres", "migration", m.Name)
		}
		return nil
	})
}

type scanner interface{ Scan(dest ...any) error }

func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// utcPtr returns t in UTC; nil stays nil.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// nullText maps empty JSON or strings to NULL.
func nullText[T ~string | ~[]byte](v T) *string {
	if len(v) == 0 {
		return nil
	}
	s := string(v)
	return &s
}
