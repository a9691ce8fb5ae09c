package runs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// Limits of session streams and metadata.
const (
	MaxRecordBytes        = 1 << 20
	MaxRecordIDLength     = 256
	MaxMetadataKeyLength  = 128
	MaxMetadataValueBytes = 64 << 10
	// MaxMetadataKeys bounds the keys of one run's metadata.
	MaxMetadataKeys = 256
)

// errNoSessions: the run store keeps no session streams.
var errNoSessions = errors.New("this store keeps no session streams or run metadata")

func (s *Service) sessionStore() (SessionStore, error) {
	ss, ok := s.store.(SessionStore)
	if !ok {
		return nil, errNoSessions
	}
	return ss, nil
}

// Append appends data (any JSON value) to a session stream of the run.
// With an idempotency id, a repeat with the same data returns the first
// record and created=false; with other data it is errdefs.ErrConflict. A run that
// ended takes no more records (errdefs.ErrConflict).
func (s *Service) Append(ctx context.Context, runID, stream, id string, data json.RawMessage) (Record, bool, error) {
	ss, err := s.sessionStore()
	if err != nil {
		return Record{}, false, err
	}
	if !ValidStream(stream) {
		return Record{}, false, fmt.Errorf("unknown session stream %q (input or output): %w", stream, errdefs.ErrInvalid)
	}
	if len(id) > MaxRecordIDLength {
		return Record{}, false, fmt.Errorf("idempotency id longer than %d characters: %w", MaxRecordIDLength, errdefs.ErrInvalid)
	}
	compact, err := compactJSON(data, MaxRecordBytes, "record data")
	if err != nil {
		return Record{}, false, err
	}
	rec, created, err := ss.AppendRecord(ctx, runID, stream, NewRecord{ID: id, Time: s.now(), Data: compact})
	if err != nil {
		return Record{}, false, err
	}
	if created {
		s.broker.Publish(runID)
	}
	return rec, created, nil
}

// Records returns up to limit records of the run's stream after seq after.
func (s *Service) Records(ctx context.Context, runID, stream string, after int64, limit int) ([]Record, error) {
	ss, err := s.sessionStore()
	if err != nil {
		return nil, err
	}
	if !ValidStream(stream) {
		return nil, fmt.Errorf("unknown session stream %q (input or output): %w", stream, errdefs.ErrInvalid)
	}
	return ss.ListRecords(ctx, runID, stream, after, limit)
}

// NextRecords waits until the run's stream has records after seq after,
// the run ends, wait passes or ctx ends, and returns the records there
// are (none when it stopped waiting).
func (s *Service) NextRecords(ctx context.Context, runID, stream string, after int64, limit int, wait time.Duration) ([]Record, error) {
	changed, unsubscribe := s.broker.Subscribe(runID)
	defer unsubscribe()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	poll := time.NewTicker(time.Second) // appends on other replicas
	defer poll.Stop()
	for {
		recs, err := s.Records(ctx, runID, stream, after, limit)
		if err != nil || len(recs) > 0 {
			return recs, err
		}
		run, err := s.Get(ctx, runID)
		if err != nil {
			return nil, err
		}
		if run.Status.Terminal() {
			return recs, nil
		}
		select {
		case <-changed:
		case <-poll.C:
		case <-deadline.C:
			return recs, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// SetMetadata sets one key of the run's metadata to value (any JSON).
func (s *Service) SetMetadata(ctx context.Context, runID, key string, value json.RawMessage) error {
	ss, err := s.sessionStore()
	if err != nil {
		return err
	}
	if key == "" || len(key) > MaxMetadataKeyLength {
		return fmt.Errorf("metadata key must be 1-%d bytes: %w", MaxMetadataKeyLength, errdefs.ErrInvalid)
	}
	compact, err := compactJSON(value, MaxMetadataValueBytes, "metadata value")
	if err != nil {
		return err
	}
	md, err := ss.Metadata(ctx, runID)
	if err != nil {
		return err
	}
	if _, ok := md[key]; !ok && len(md) >= MaxMetadataKeys {
		return fmt.Errorf("run %s has %d metadata keys, the most allowed: %w", runID, MaxMetadataKeys, errdefs.ErrInvalid)
	}
	return ss.SetMetadata(ctx, runID, key, compact)
}

// Metadata returns the run's metadata.
func (s *Service) Metadata(ctx context.Context, runID string) (map[string]json.RawMessage, error) {
	ss, err := s.sessionStore()
	if err != nil {
		return nil, err
	}
	return ss.Metadata(ctx, runID)
}

// compactJSON checks that data is one JSON value of at most max bytes and
// returns it compacted (absent data is null).
func compactJSON(data json.RawMessage, max int, what string) (json.RawMessage, error) {
	if len(data) == 0 {
		return json.RawMessage("null"), nil
	}
	if len(data) > max {
		return nil, fmt.Errorf("%s is %d bytes, more than the %d allowed: %w", what, len(data), max, errdefs.ErrInvalid)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %w", what, errdefs.ErrInvalid)
	}
	return b.Bytes(), nil
}
