package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/helmr/helmr/internal/runs"
)

// LinkChildWait records that waitpoint waitpointID waits for the runs
// ids, in that order. A repeat of the same link changes nothing.
func (db *DB) LinkChildWait(ctx context.Context, waitpointID string, ids []string) error {
	err := db.write(ctx, func(tx txConn) error {
		for i, id := range ids {
			if _, err := tx.exec(ctx, `INSERT INTO child_waits (waitpoint_id, idx, run_id) VALUES (?, ?, ?)
				ON CONFLICT (waitpoint_id, idx) DO NOTHING`, waitpointID, i, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("link waitpoint %s to its runs: %w", waitpointID, err)
	}
	return nil
}

// ChildWaitsOf returns the waitpoints that wait for run id.
func (db *DB) ChildWaitsOf(ctx context.Context, id string) ([]string, error) {
	rows, err := db.read().query(ctx, `SELECT DISTINCT waitpoint_id FROM child_waits WHERE run_id = ? ORDER BY waitpoint_id`, id)
	ids, err := scanAll(rows, err, func(s scanner) (string, error) {
		var v string
		return v, s.Scan(&v)
	})
	if err != nil {
		return nil, fmt.Errorf("waitpoints waiting for run %s: %w", id, err)
	}
	return ids, nil
}

// ChildWaitRuns returns the runs waitpoint waitpointID waits for, in the
// order they were linked.
func (db *DB) ChildWaitRuns(ctx context.Context, waitpointID string) ([]runs.Run, error) {
	rows, err := db.read().query(ctx, `SELECT `+prefixed("r.", runColumns)+` FROM child_waits c
		JOIN runs r ON r.id = c.run_id WHERE c.waitpoint_id = ? ORDER BY c.idx`, waitpointID)
	list, err := scanAll(rows, err, scanRun)
	if err != nil {
		return nil, fmt.Errorf("runs of waitpoint %s: %w", waitpointID, err)
	}
	return list, nil
}

// prefixed qualifies each of a comma-separated column list with p.
func prefixed(p, cols string) string {
	fields := strings.Split(cols, ",")
	for i, f := range fields {
		fields[i] = p + strings.TrimSpace(f)
	}
	return strings.Join(fields, ", ")
}
