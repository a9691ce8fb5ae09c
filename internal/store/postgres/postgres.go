// Package postgres is the multi-node storage engine: the shared SQL layer
// (store.DB) over PostgreSQL, through pgx's database/sql driver. What only
// PostgreSQL has lives here: row locks (SELECT … FOR UPDATE, and SKIP
// LOCKED for leases), advisory and table locks that serialize version
// numbers, and LISTEN/NOTIFY for the shared operations queue.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/helmr/helmr/internal/store"
)

// Advisory lock classes (the first key of pg_advisory_xact_lock(int, int)).
const (
	lockMigrations  = 0x68656c6d // "helm"
	lockDeployments = 0x68656c6e
)

// Store is a PostgreSQL-backed store.DB (runs.Store, deployments.Store,
// workers.Store and the others) that also tells of changes to the
// operations queue (workspaces.OpNotifier).
type Store struct {
	*store.DB
	db   *sql.DB
	conn *pgx.ConnConfig // for the listener's own connection
	log  *slog.Logger
	// channel carries the notices of changes to the operations queue
	// (opsChannel).
	channel string
}

// Open connects to the database at url (a postgres:// URL or key=value
// string, with pgxpool's pool_* settings), applies pending migrations, and
// refuses a database whose schema is newer than this binary knows.
func Open(ctx context.Context, url string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	db := stdlib.OpenDB(*cfg.ConnConfig)
	db.SetMaxOpenConns(int(cfg.MaxConns))
	db.SetMaxIdleConns(int(cfg.MaxConns))
	db.SetConnMaxLifetime(cfg.MaxConnLifetime)
	db.SetConnMaxIdleTime(cfg.MaxConnIdleTime)
	s := &Store{db: db, conn: cfg.ConnConfig, log: logger}
	s.DB = store.NewDB(db, db, s.dialect())
	err = s.Migrate(ctx, logger)
	if err == nil {
		s.channel, err = opsChannel(ctx, db)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres %s/%s: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Database, err)
	}
	return s, nil
}

// Close closes the connection pool.
func (s *Store) Close() error {
	return s.db.Close()
}

// dialect is PostgreSQL's SQL: $n placeholders, row locks, timestamptz,
// tags as text[], and the locks and notices of s.
func (s *Store) dialect() *store.Dialect {
	return &store.Dialect{
		Name:       "postgres",
		Numbered:   true,
		ForUpdate:  " FOR UPDATE",
		SkipLocked: " FOR UPDATE SKIP LOCKED",
		Time:       func(t time.Time) any { return t },
		Tags:       func(tags []string) any { return tags },
		TagsDest:   func(tags *[]string) sql.Scanner { return textArray{tags} },
		HasTag:     "tags @> ARRAY[?::text]",
		Lock:       lock,
		Notify:     s.notify,
		Retryable:  retryable,
		Types: store.Types{
			Postgres: true,
			Time:     "timestamptz", Blob: "bytea", Real: "double precision", BigInt: "bigint",
			Serial:  "BIGSERIAL PRIMARY KEY",
			Strings: "text[] NOT NULL DEFAULT '{}'",
		},
	}
}

// retryable reports whether err says the statement never ran because its
// connection was gone: the server was shutting down or starting up
// (SQLSTATE 57P01-57P03), could not be reached, or pgx knows nothing was
// sent. An error after the statement reached a live server is not.
func retryable(err error) bool {
	if errors.Is(err, driver.ErrBadConn) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
			return true
		}
		return false
	}
	var connect *pgconn.ConnectError
	return errors.As(err, &connect) || pgconn.SafeToRetry(err)
}

// lock serializes writers until tx ends: migrations and deploys to a
// project/env with the advisory locks replicas have always taken, data
// keys with a table lock, other tables' rows of one key with an advisory
// lock on the table's and the key's names.
func lock(ctx context.Context, tx *sql.Tx, table, key string) error {
	var err error
	switch table {
	case "schema_migrations":
		_, err = tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, 0)`, lockMigrations)
	case "deployments":
		_, err = tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, lockDeployments, key)
	case "vault_keys":
		_, err = tx.ExecContext(ctx, `LOCK TABLE vault_keys IN EXCLUSIVE MODE`)
	default:
		_, err = tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2))`, table, key)
	}
	return err
}

// textArray scans a text[] column (as database/sql hands it over, in text
// format); NULL is an empty list.
type textArray struct{ tags *[]string }

// typeMaps holds pgtype.Maps (one goroutine's at a time) for textArray.
var typeMaps = sync.Pool{New: func() any { return pgtype.NewMap() }}

func (a textArray) Scan(src any) error {
	var tags []string
	m := typeMaps.Get().(*pgtype.Map)
	defer typeMaps.Put(m)
	if err := m.SQLScanner(&tags).Scan(src); err != nil {
		return err
	}
	if tags == nil {
		tags = []string{}
	}
	*a.tags = tags
	return nil
}
