package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/helmr/helmr/internal/workspaces"
)

var _ workspaces.OpNotifier = (*Store)(nil)

// notify tells the listeners (ListenOps), when tx commits, that operation
// id changed ("": one was queued).
func (s *Store) notify(ctx context.Context, tx *sql.Tx, id string) error {
	_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, s.channel, id)
	return err
}

// opsChannel returns the channel of the notices of changes to the
// operations queue: one per schema, so that stores sharing a database in
// other schemas do not hear each other.
func opsChannel(ctx context.Context, db *sql.DB) (string, error) {
	var schema string
	if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return "", fmt.Errorf("read the current schema: %w", err)
	}
	if schema == "public" {
		return "helmr_ops", nil
	}
	sum := sha256.Sum256([]byte(schema))
	return "helmr_ops_" + hex.EncodeToString(sum[:8]), nil
}

// ListenOps implements workspaces.OpNotifier with LISTEN on a connection
// of its own.
func (s *Store) ListenOps(ctx context.Context, changed func(id string)) {
	for ctx.Err() == nil {
		err := s.listenOps(ctx, changed)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("listen for workspace operations; polling meanwhile", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) listenOps(ctx context.Context, changed func(id string)) error {
	conn, err := pgx.ConnectConfig(ctx, s.conn.Copy()) // it listens for as long as it lives: not the pool's
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		return err
	}
	changed(workspaces.AnyOp) // what changed before it listened went unheard
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		changed(n.Payload)
	}
}
