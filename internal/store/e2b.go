package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/e2b"
	"github.com/helmr/helmr/internal/errdefs"
)

const e2bSandboxColumns = `id, project, env, template_id, metadata, env_vars, auto_pause, started_at, end_at`

func scanE2BSandbox(row scanner) (e2b.Sandbox, error) {
	var (
		sb            e2b.Sandbox
		meta, envVars string
		autoPause     int
	)
	if err := row.Scan(&sb.ID, &sb.Project, &sb.Env, &sb.TemplateID, &meta, &envVars, &autoPause,
		timeCol{&sb.StartedAt}, timeCol{&sb.EndAt}); err != nil {
		return e2b.Sandbox{}, err
	}
	sb.AutoPause = autoPause != 0
	if err := json.Unmarshal([]byte(meta), &sb.Metadata); err != nil {
		return e2b.Sandbox{}, fmt.Errorf("e2b sandbox %s metadata: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(envVars), &sb.EnvVars); err != nil {
		return e2b.Sandbox{}, fmt.Errorf("e2b sandbox %s envVars: %w", sb.ID, err)
	}
	return sb, nil
}

// stringMap encodes m as a JSON object ({} for nil).
func stringMap(m map[string]string) string {
	if m == nil {
		return "{}"
	}
	b, _ := json.Marshal(m) // a map of strings always encodes
	return string(b)
}

// CreateE2BSandbox stores sb (see e2b.Store).
func (db *DB) CreateE2BSandbox(ctx context.Context, sb e2b.Sandbox) error {
	if _, err := db.writer().exec(ctx, `INSERT INTO e2b_sandboxes (`+e2bSandboxColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		sb.ID, sb.Project, sb.Env, sb.TemplateID, stringMap(sb.Metadata), stringMap(sb.EnvVars), boolInt(sb.AutoPause),
		Time(sb.StartedAt), Time(sb.EndAt)); err != nil {
		return fmt.Errorf("create e2b sandbox %s: %w", sb.ID, err)
	}
	return nil
}

// GetE2BSandbox returns sandbox id, or errdefs.ErrNotFound.
func (db *DB) GetE2BSandbox(ctx context.Context, id string) (e2b.Sandbox, error) {
	sb, err := scanE2BSandbox(db.read().queryRow(ctx, `SELECT `+e2bSandboxColumns+` FROM e2b_sandboxes WHERE id = ?`, id))
	if err != nil {
		return e2b.Sandbox{}, wrap(err, errdefs.ErrNotFound, "get e2b sandbox %s", id)
	}
	return sb, nil
}

// ListE2BSandboxes returns the sandboxes of project/env below id before,
// highest id first.
func (db *DB) ListE2BSandboxes(ctx context.Context, project, env, before string, limit int) ([]e2b.Sandbox, error) {
	q := `SELECT ` + e2bSandboxColumns + ` FROM e2b_sandboxes WHERE project = ? AND env = ?`
	args := []any{project, env}
	if before != "" {
		q += ` AND id < ?`
		args = append(args, before)
	}
	rows, err := db.read().query(ctx, q+` ORDER BY id DESC LIMIT ?`, append(args, limit)...)
	out, err := scanAll(rows, err, scanE2BSandbox)
	if err != nil {
		return nil, fmt.Errorf("list e2b sandboxes of %s/%s: %w", project, env, err)
	}
	return out, nil
}

// SetE2BSandboxEnd moves sandbox id's end.
func (db *DB) SetE2BSandboxEnd(ctx context.Context, id string, end time.Time) error {
	n, err := db.writer().changed(ctx, `UPDATE e2b_sandboxes SET end_at = ? WHERE id = ?`, Time(end), id)
	if err != nil {
		return fmt.Errorf("set e2b sandbox %s end: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("set e2b sandbox %s end: %w", id, errdefs.ErrNotFound)
	}
	return nil
}

// DeleteE2BSandbox forgets sandbox id.
func (db *DB) DeleteE2BSandbox(ctx context.Context, id string) error {
	if _, err := db.writer().exec(ctx, `DELETE FROM e2b_sandboxes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete e2b sandbox %s: %w", id, err)
	}
	return nil
}

// EndedE2BSandboxes returns sandboxes whose end is at or before now.
func (db *DB) EndedE2BSandboxes(ctx context.Context, now time.Time, limit int) ([]e2b.Sandbox, error) {
	rows, err := db.read().query(ctx, `SELECT `+e2bSandboxColumns+` FROM e2b_sandboxes
		WHERE end_at <= ? ORDER BY end_at, id LIMIT ?`, Time(now), limit)
	out, err := scanAll(rows, err, scanE2BSandbox)
	if err != nil {
		return nil, fmt.Errorf("ended e2b sandboxes: %w", err)
	}
	return out, nil
}
