// Package store is the storage layer both engines share: every query and
// row scan of the domain's stores, written once over database/sql (DB),
// with a Dialect for the little that differs; the migrations, one set of
// templates for both; and the rules the queries apply (IDs, list cursors
// and limits, run transitions, checks and encodings of run needs,
// workers, waitpoints and workspaces). store/sqlite and store/postgres open
// their databases and describe their dialects; store/storetest is the
// suite both must pass.
package store

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/waitpoints"
)

// Run and deployment ID prefixes.
const (
	RunPrefix        = "run_"
	DeploymentPrefix = "dep_"
)

// idEncoding is lower-case Crockford base32: its alphabet is in ASCII order,
// so encoded IDs sort like the bytes they encode.
var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewID returns prefix followed by 26 characters encoding 16 bytes: a 48-bit
// millisecond timestamp (big-endian) and 80 random bits. IDs made in later
// milliseconds sort after earlier ones.
func NewID(prefix string) string {
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails
	return prefix + idEncoding.EncodeToString(b[:])
}

// Time converts t to the precision and zone every store keeps: UTC,
// truncated to microseconds. A zero t becomes now.
func Time(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UTC().Truncate(time.Microsecond)
}

// TimePtr is Time for optional times; nil stays nil.
func TimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := Time(*t)
	return &u
}

// Limit clamps a requested page size n to 1..max, with def for n <= 0.
func Limit(n, def, max int) int {
	switch {
	case n <= 0:
		return def
	case n > max:
		return max
	}
	return n
}

// Page sizes applied by the engines.
const (
	DefaultRunsLimit        = 50
	MaxRunsLimit            = 1000
	DefaultEventsLimit      = 1000
	MaxEventsLimit          = 10000
	DefaultDeploymentsLimit = 50
	MaxDeploymentsLimit     = 1000
)

// EncodeBindings is a run's secret bindings as stored (a JSON object).
func EncodeBindings(b map[string]string) string {
	if len(b) == 0 {
		return "{}"
	}
	data, _ := json.Marshal(b)
	return string(data)
}

// DecodeBindings reads stored secret bindings; none is nil.
func DecodeBindings(runID, s string) (map[string]string, error) {
	if s == "" || s == "{}" {
		return nil, nil
	}
	var b map[string]string
	if err := json.Unmarshal([]byte(s), &b); err != nil {
		return nil, fmt.Errorf("decode secret bindings of run %s: %w", runID, err)
	}
	return b, nil
}

// WaitpointPrefix starts waitpoint ids.
const WaitpointPrefix = "wp_"

// Page sizes of waitpoint lists.
const (
	DefaultWaitpointsLimit = 50
	MaxWaitpointsLimit     = 1000
)

// NewWaitpoint fills the fields CreateWaitpoint assigns: ID when empty,
// status WAITING, normalized times, no resolution, tags never nil.
func NewWaitpoint(w waitpoints.Waitpoint) waitpoints.Waitpoint {
	if w.ID == "" {
		w.ID = NewID(WaitpointPrefix)
	}
	w.Status = waitpoints.StatusWaiting
	w.CreatedAt = Time(w.CreatedAt)
	w.TimeoutAt = TimePtr(w.TimeoutAt)
	w.Data, w.Reason, w.WaitedAt, w.CompletedAt, w.CallbackURL = nil, "", nil, nil, ""
	if w.Tags == nil {
		w.Tags = []string{}
	}
	return w
}

// EncodeTags is a waitpoint's tags as stored (a JSON array).
func EncodeTags(tags []string) string {
	if len(tags) == 0 {
		return "[]"
	}
	b, _ := json.Marshal(tags)
	return string(b)
}

// DecodeTags reverses EncodeTags; none is an empty list.
func DecodeTags(id, s string) ([]string, error) {
	tags := []string{}
	if s == "" {
		return tags, nil
	}
	if err := json.Unmarshal([]byte(s), &tags); err != nil {
		return nil, fmt.Errorf("decode tags of waitpoint %s: %w", id, err)
	}
	return tags, nil
}

// CheckResolution decides a ResolveWaitpoint on waitpoint w (its row
// locked): apply (true) when w waits; for a resolved w, nil when it is
// already resolved the same way (r.Status, and for a completion the same
// data), else errdefs.ErrConflict.
func CheckResolution(w waitpoints.Waitpoint, r waitpoints.Resolution) (bool, error) {
	if w.Status == waitpoints.StatusWaiting {
		return true, nil
	}
	if w.Status == r.Status && (r.Status != waitpoints.StatusCompleted || string(w.Data) == string(r.Data)) {
		return false, nil
	}
	what := "it is " + string(w.Status)
	if w.Status == r.Status {
		what = "it was completed with other data"
	}
	return false, fmt.Errorf("%s waitpoint %s: %s: %w", strings.ToLower(verb(r.Status)), w.ID, what, errdefs.ErrConflict)
}

func verb(s waitpoints.Status) string {
	switch s {
	case waitpoints.StatusCompleted:
		return "Complete"
	case waitpoints.StatusCanceled:
		return "Cancel"
	}
	return "Time out"
}

// Page sizes of session stream lists.
const (
	DefaultRecordsLimit = 1000
	MaxRecordsLimit     = 10000
)

// CheckRepeat decides an append whose idempotency id the stream already
// holds as first: the first record (nil) when the data is the same, else
// errdefs.ErrConflict.
func CheckRepeat(first runs.Record, rec runs.NewRecord) error {
	if string(first.Data) == string(rec.Data) {
		return nil
	}
	return fmt.Errorf("append to the %s of run %s: idempotency id %q was used with other data (record %d): %w",
		first.Stream, first.RunID, rec.ID, first.Seq, errdefs.ErrConflict)
}

// CheckOpen refuses appends to the streams of a run that ended.
func CheckOpen(runID, stream string, status runs.Status) error {
	if status.Terminal() {
		return fmt.Errorf("append to the %s of run %s: the run is %s: %w", stream, runID, status, errdefs.ErrConflict)
	}
	return nil
}
