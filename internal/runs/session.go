package runs

import (
	"context"
	"encoding/json"
	"time"
)

// Session streams: a run's input (from clients to the task) and output
// (from the task, or an outside process, to clients).
const (
	StreamInput  = "input"
	StreamOutput = "output"
)

// ValidStream reports whether s names a session stream.
func ValidStream(s string) bool { return s == StreamInput || s == StreamOutput }

// Record is one entry of a run's session stream. Seq starts at 1 and grows
// by one per record of the stream.
type Record struct {
	RunID  string `json:"runId"`
	Stream string `json:"stream"`
	Seq    int64  `json:"seq"`
	// ID is the append's idempotency id, if it carried one.
	ID   string          `json:"idempotencyKey,omitempty"`
	Time time.Time       `json:"time"`
	Data json.RawMessage `json:"data"`
}

// NewRecord is a record to append; the store assigns Seq.
type NewRecord struct {
	// ID, if set, makes the append idempotent within the stream.
	ID   string
	Time time.Time
	// Data is compact JSON: records with the same ID compare by its bytes.
	Data json.RawMessage
}

// SessionStore is the optional capability of a Store that keeps session
// streams and run metadata.
type SessionStore interface {
	// AppendRecord appends rec to the run's stream. If rec.ID was appended
	// to the stream before, it returns that record and created=false when
	// its data is the same, and errdefs.ErrConflict (wrapped) when not. A run that
	// ended takes no more records (errdefs.ErrConflict); an unknown run is
	// errdefs.ErrNotFound.
	AppendRecord(ctx context.Context, runID, stream string, rec NewRecord) (r Record, created bool, err error)
	// ListRecords returns up to limit records of the stream with Seq >
	// after, in order; errdefs.ErrNotFound for an unknown run.
	ListRecords(ctx context.Context, runID, stream string, after int64, limit int) ([]Record, error)
	// SetMetadata sets (or replaces) one key of the run's metadata;
	// errdefs.ErrNotFound for an unknown run.
	SetMetadata(ctx context.Context, runID, key string, value json.RawMessage) error
	// Metadata returns the run's metadata (empty, not nil, when none);
	// errdefs.ErrNotFound for an unknown run.
	Metadata(ctx context.Context, runID string) (map[string]json.RawMessage, error)
}
