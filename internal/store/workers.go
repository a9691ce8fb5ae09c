package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/workers"
	"github.com/helmr/helmr/internal/workspaces"
)

// ValidateNeed rejects needs no worker could meet or compare against: a
// negative, NaN or infinite CPU, or negative memory (errdefs.ErrInvalid).
func ValidateNeed(n workers.Need) error {
	if n.CPU < 0 || math.IsNaN(n.CPU) || math.IsInf(n.CPU, 0) || n.MemoryBytes < 0 {
		return fmt.Errorf("needs %g vCPUs and %d bytes of memory: %w", n.CPU, n.MemoryBytes, errdefs.ErrInvalid)
	}
	return nil
}

// errEmptyWorkerID rejects a worker without an id. The workers package has
// no invalid-argument sentinel; callers assign ids themselves.
var errEmptyWorkerID = errors.New("empty worker id")

// NewWorker prepares w for UpsertWorker: it rejects an empty id, normalizes
// LastSeen like every stored time (now when zero), and encodes the
// capabilities as the JSON the engines store.
func NewWorker(w workers.Worker) (workers.Worker, string, error) {
	if w.ID == "" {
		return workers.Worker{}, "", fmt.Errorf("upsert worker: %w", errEmptyWorkerID)
	}
	w.LastSeen = Time(w.LastSeen)
	b, err := json.Marshal(w.Capabilities)
	if err != nil {
		return workers.Worker{}, "", fmt.Errorf("encode capabilities of worker %s: %w", w.ID, err)
	}
	return w, string(b), nil
}

// DecodeCapabilities reverses the encoding of NewWorker for worker id.
func DecodeCapabilities(id, s string) (workers.Capabilities, error) {
	var c workers.Capabilities
	if err := json.Unmarshal([]byte(s), &c); err != nil {
		return workers.Capabilities{}, fmt.Errorf("decode capabilities of worker %s: %w", id, err)
	}
	return c, nil
}

// Since converts a lower bound on stored times to their precision: UTC,
// rounded up to the microsecond, so that "at or after since" keeps its
// meaning against truncated times. Unlike Time, a zero since stays zero
// (everything matches).
func Since(t time.Time) time.Time {
	u := t.UTC().Truncate(time.Microsecond)
	if u.Before(t) {
		u = u.Add(time.Microsecond)
	}
	return u
}

// EncodeDigests is a need's digests as stored: space-separated (digests
// hold no spaces).
func EncodeDigests(d []string) string { return strings.Join(d, " ") }

// DecodeDigests reverses EncodeDigests; none is nil.
func DecodeDigests(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Fields(s)
}

// RunKind is a run's stored kind: task runs have the empty kind in memory
// only before they are stored.
func RunKind(k string) string {
	if k == "" {
		return runs.KindTask
	}
	return k
}

// LeaseCandidates bounds how many queued runs that fit a worker's CPU and
// memory LeaseRun reads to find one whose digest needs the worker meets.
const LeaseCandidates = 64

// Workspace list page sizes.
const (
	DefaultWorkspacesLimit = 50
	MaxWorkspacesLimit     = 1000
)

// NewWorkspace prepares w for CreateWorkspace: an ID and creation time
// when unset, and the fields every workspace needs.
func NewWorkspace(w workspaces.Workspace) (workspaces.Workspace, error) {
	if w.Project == "" || w.Env == "" || w.TaskID == "" {
		return workspaces.Workspace{}, fmt.Errorf("create workspace: project, env and task are required: %w", errdefs.ErrInvalid)
	}
	if w.QuotaBytes != 0 && (w.QuotaBytes < workspaces.MinQuota || w.QuotaBytes > workspaces.MaxQuota) {
		return workspaces.Workspace{}, fmt.Errorf("create workspace: quota %d bytes is outside 8Mi to 16Ti: %w", w.QuotaBytes, errdefs.ErrInvalid)
	}
	if w.ID == "" {
		w.ID = NewID(workspaces.Prefix)
	}
	w.CreatedAt = Time(w.CreatedAt)
	w.Host, w.LastRunID, w.UsedAt, w.DeletedAt, w.Snapshot = "", "", nil, nil, nil
	return w, nil
}

// CheckSnapshot reports whether snap may become w's latest snapshot
// (RecordSnapshot): w is live and on host, and snap follows its latest.
func CheckSnapshot(w workspaces.Workspace, host string, snap workspaces.Snapshot) error {
	var cur int64
	if w.Snapshot != nil {
		cur = w.Snapshot.Seq
	}
	switch {
	case w.DeletedAt != nil:
		return fmt.Errorf("it was deleted: %w", errdefs.ErrNotFound)
	case snap.BlobID == "" || snap.Size <= 0:
		return fmt.Errorf("a snapshot needs its blob and size: %w", errdefs.ErrInvalid)
	case host == "" || w.Host != host:
		return fmt.Errorf("its files are on host %q, not %q: %w", w.Host, host, errdefs.ErrConflict)
	case snap.Seq != cur+1:
		return fmt.Errorf("its latest snapshot is %d: %w", cur, errdefs.ErrConflict)
	}
	return nil
}

// IDRows is the result of a query returning one id column.
type IDRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// Gone returns the ids that rows (the live ones among ids) do not hold.
func Gone(ids []string, rows IDRows) ([]string, error) {
	found, err := IDs(rows)
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, id := range found {
		live[id] = true
	}
	var out []string
	for _, id := range ids {
		if !live[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// IDs reads rows of one id each.
func IDs(rows IDRows) ([]string, error) {
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// UpsertWorker records w's capabilities and last-seen time, replacing what
// was recorded for its id.
func (db *DB) UpsertWorker(ctx context.Context, w workers.Worker) error {
	w, caps, err := NewWorker(w)
	if err != nil {
		return err
	}
	_, err = db.writer().exec(ctx, `INSERT INTO workers (id, capabilities, last_seen) VALUES (?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET capabilities = excluded.capabilities, last_seen = excluded.last_seen`,
		w.ID, caps, w.LastSeen)
	if err != nil {
		return fmt.Errorf("upsert worker %s: %w", w.ID, err)
	}
	return nil
}

// ListWorkers returns the workers seen at or after since, by id.
func (db *DB) ListWorkers(ctx context.Context, since time.Time) ([]workers.Worker, error) {
	rows, err := db.read().query(ctx, `SELECT id, capabilities, last_seen FROM workers
		WHERE last_seen >= ? ORDER BY id`, Since(since))
	out, err := scanAll(rows, err, func(row scanner) (workers.Worker, error) {
		var w workers.Worker
		var caps string
		if err := row.Scan(&w.ID, &caps, timeCol{&w.LastSeen}); err != nil {
			return w, err
		}
		var err error
		w.Capabilities, err = DecodeCapabilities(w.ID, caps)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}
