package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/e2b"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/schedules"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/workers"
	"github.com/helmr/helmr/internal/workspaces"
)

// Store is every domain store, as both engines implement it over one
// schema: the control plane and the store suite (storetest) take it.
type Store interface {
	runs.Store
	runs.SessionStore
	runs.StatsStore
	deployments.Store
	workers.Store
	workspaces.Store
	workspaces.TrajectoryStore
	workspaces.OpQueue
	waitpoints.Store
	apikeys.Store
	apikeys.SessionStore
	checkpoints.Store
	vault.Store
	schedules.Store
	e2b.Store
}

var _ Store = (*DB)(nil)

// DB is the SQL layer both engines share: every query and row scan of
// Store, written once over database/sql. An engine opens the pools, describes
// itself in a Dialect, and embeds the DB in its Store.
type DB struct {
	d *Dialect
	w *sql.DB // writes: a pool, or SQLite's one connection
	r *sql.DB // reads: w, or SQLite's read-only pool
}

// NewDB returns the SQL layer over the pools w (writes) and r (reads; w
// when the engine has one pool) in dialect d.
func NewDB(w, r *sql.DB, d *Dialect) *DB {
	return &DB{d: d, w: w, r: r}
}

// Dialect holds what differs between the engines' SQL, as Dex's SQL
// storage calls its flavors: the shared queries are written with ?
// placeholders and these hooks.
type Dialect struct {
	// Name names the engine in log lines.
	Name string
	// Numbered rebinds ? placeholders to $1, $2, ... (PostgreSQL).
	Numbered bool
	// ForUpdate ends a SELECT that reads rows a write transaction goes on
	// to change: " FOR UPDATE", or "" where one writer at a time already
	// holds the database.
	ForUpdate string
	// SkipLocked ends the SELECT of a lease or queue take, so that
	// concurrent takers pass over each other's rows.
	SkipLocked string
	// Time encodes a time argument (already UTC, in microseconds).
	Time func(time.Time) any
	// Tags encodes a waitpoint's tags as an argument; TagsDest scans them
	// (never nil after a scan).
	Tags     func([]string) any
	TagsDest func(*[]string) sql.Scanner
	// HasTag is the condition that a waitpoint's tags hold the one
	// argument it takes.
	HasTag string
	// Lock serializes the writers of table's rows with key (all of
	// table's rows when key is empty) until tx ends; nil where one writer
	// at a time already holds the database.
	Lock func(ctx context.Context, tx *sql.Tx, table, key string) error
	// Notify tells the engine's listeners, when tx commits, that workspace
	// operation id changed ("" for a newly queued one); nil where nothing
	// listens.
	Notify func(ctx context.Context, tx *sql.Tx, id string) error
	// Types are the engine's words for the types the shared migrations
	// name.
	Types Types
	// Retryable, if set, reports whether a statement or transaction that
	// failed with err was not carried out because its connection was
	// gone (the database restarting, or a pooled connection it closed),
	// so that it may be sent again on another.
	Retryable func(err error) bool
}

// Retries of a statement or transaction whose connection was gone: about
// five seconds in all, long enough for a database to restart.
const (
	retries      = 7
	retryBackoff = 50 * time.Millisecond
)

// again reports whether a call that failed with err (attempt n, from 0)
// may be sent again, after waiting the backoff; false once ctx is over.
func (d *Dialect) again(ctx context.Context, err error, n int) bool {
	if err == nil || d.Retryable == nil || n >= retries || errors.As(err, new(errCommit)) || !d.Retryable(err) {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(retryBackoff << n):
		return true
	}
}

// conn runs statements in the dialect, on a pool or a transaction.
type conn struct {
	q interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	}
	d *Dialect
	// pool: statements commit on their own, so one whose connection was
	// gone may be sent again (not so in a transaction: write retries it
	// whole).
	pool bool
}

func (c conn) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	for n := 0; ; n++ {
		res, err := c.q.ExecContext(ctx, c.d.rebind(query), c.d.args(args)...)
		if !c.pool || !c.d.again(ctx, err, n) {
			return res, err
		}
	}
}

func (c conn) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	for n := 0; ; n++ {
		rows, err := c.q.QueryContext(ctx, c.d.rebind(query), c.d.args(args)...)
		if !c.pool || !c.d.again(ctx, err, n) {
			return rows, err
		}
	}
}

// row is the one row of queryRow, read when scanned.
type row struct {
	c     conn
	ctx   context.Context
	query string
	args  []any
}

// Scan runs the query and scans its row into dest, as sql.Row.Scan does.
func (r row) Scan(dest ...any) error {
	for n := 0; ; n++ {
		err := r.c.q.QueryRowContext(r.ctx, r.query, r.args...).Scan(dest...)
		if !r.c.pool || errors.Is(err, sql.ErrNoRows) || !r.c.d.again(r.ctx, err, n) {
			return err
		}
	}
}

func (c conn) queryRow(ctx context.Context, query string, args ...any) row {
	return row{c: c, ctx: ctx, query: c.d.rebind(query), args: c.d.args(args)}
}

// changed runs a statement and returns how many rows it changed.
func (c conn) changed(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := c.exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// txConn is a write transaction.
type txConn struct {
	conn
	tx *sql.Tx
}

// lock takes the dialect's Lock, if it has one.
func (t txConn) lock(ctx context.Context, table, key string) error {
	if t.d.Lock == nil {
		return nil
	}
	if err := t.d.Lock(ctx, t.tx, table, key); err != nil {
		return fmt.Errorf("lock %s: %w", table, err)
	}
	return nil
}

// notify sends the dialect's Notify, if it has one.
func (t txConn) notify(ctx context.Context, id string) error {
	if t.d.Notify == nil {
		return nil
	}
	return t.d.Notify(ctx, t.tx, id)
}

// read is the read pool; writer is the write pool, for a statement that
// commits on its own.
func (db *DB) read() conn   { return conn{q: db.r, d: db.d, pool: true} }
func (db *DB) writer() conn { return conn{q: db.w, d: db.d, pool: true} }

// write runs fn in a transaction on the write pool (BEGIN IMMEDIATE on
// SQLite's writer) and commits it when fn returns nil. A transaction
// whose connection was gone before it committed is run again, fn and
// all: nothing of it was kept.
func (db *DB) write(ctx context.Context, fn func(tx txConn) error) error {
	for n := 0; ; n++ {
		err := db.writeOnce(ctx, fn)
		if !db.d.again(ctx, err, n) {
			return err
		}
	}
}

// errCommit marks a failed commit: whether it took is unknown, so it is
// never retried.
type errCommit struct{ err error }

func (e errCommit) Error() string { return "commit: " + e.err.Error() }
func (e errCommit) Unwrap() error { return e.err }

func (db *DB) writeOnce(ctx context.Context, fn func(tx txConn) error) error {
	sqlTx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(txConn{conn: conn{q: sqlTx, d: db.d}, tx: sqlTx}); err != nil {
		_ = sqlTx.Rollback()
		return err
	}
	if err := sqlTx.Commit(); err != nil {
		return errCommit{err}
	}
	return nil
}

// rebind turns the ? placeholders of query (outside quoted literals) into
// $1, $2, ... for a Numbered dialect.
func (d *Dialect) rebind(query string) string {
	if !d.Numbered || !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	b.Grow(len(query) + 16)
	n, quoted := 0, false
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '\'':
			quoted = !quoted
		case c == '?' && !quoted:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// args encodes the time arguments of a statement in the dialect; args
// itself is left as it is.
func (d *Dialect) args(args []any) []any {
	out, copied := args, false
	for i, a := range args {
		var v any
		switch a := a.(type) {
		case time.Time:
			v = d.Time(a.UTC().Truncate(time.Microsecond))
		case *time.Time:
			if a != nil {
				v = d.Time(a.UTC().Truncate(time.Microsecond))
			}
		default:
			continue
		}
		if !copied {
			out, copied = append([]any(nil), args...), true
		}
		out[i] = v
	}
	return out
}

// placeholders returns n comma-separated placeholders.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// orMissing returns err, or kind (the domain's not-found error) for
// sql.ErrNoRows.
func orMissing(err, kind error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return kind
	}
	return err
}

// wrap adds what to err, and maps sql.ErrNoRows to kind (orMissing).
func wrap(err, kind error, what string, args ...any) error {
	return fmt.Errorf(what+": %w", append(args, orMissing(err, kind))...)
}
