package waitpoints

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// Limits of what a waitpoint may hold.
const (
	MaxDataBytes        = 1 << 20
	MaxDisplayTextBytes = 4 << 10
	MaxSchemaBytes      = 64 << 10
	MaxTags             = 10
	MaxTagLength        = 128
	MaxKeyLength        = 256
	// MaxTimeout bounds a timeout or timer (a year).
	MaxTimeout = 366 * 24 * time.Hour
)

// RunLifecycle is what the service needs of the run service.
type RunLifecycle interface {
	Get(ctx context.Context, id string) (runs.Run, error)
	WaitOn(ctx context.Context, id string, note runs.SystemData) (runs.Run, error)
	Resume(ctx context.Context, id string, note runs.SystemData) (runs.Run, error)
}

// Service implements waitpoints over a Store: creation, resolution
// (completion, cancellation, timeouts), callbacks, and the waits of runs.
type Service struct {
	// BaseURL is the control plane's URL, for callback URLs. Set before use.
	BaseURL string
	// Resolved, if set, is called after a waitpoint resolved (completed,
	// canceled or timed out), for what waits on it without a worker
	// polling: parked runs. Set before use.
	Resolved func(ctx context.Context, w Waitpoint)

	store Store
	runs  RunLifecycle
	log   *slog.Logger
	now   func() time.Time

	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// NewService wires a waitpoint service.
func NewService(store Store, rl RunLifecycle, log *slog.Logger) *Service {
	return &Service{store: store, runs: rl, log: log, now: func() time.Time { return time.Now().UTC() },
		subs: map[string]map[chan struct{}]struct{}{}}
}

// SetClock replaces the service's clock (tests).
func (s *Service) SetClock(now func() time.Time) { s.now = now }

// CreateRequest asks for a new waitpoint.
type CreateRequest struct {
	Project string `json:"-"`
	Env     string `json:"-"`
	// RunID is set when a task creates the waitpoint.
	RunID          string          `json:"-"`
	Kind           Kind            `json:"kind"`
	DisplayText    string          `json:"displayText,omitempty"`
	Schema         json.RawMessage `json:"schema,omitempty"`
	Tags           []string        `json:"tags,omitempty"`
	IdempotencyKey string          `json:"idempotencyKey,omitempty"`
	// TimeoutSeconds, if positive, times the waitpoint out (a timer:
	// fires) that long after creation.
	TimeoutSeconds float64 `json:"timeoutSeconds,omitempty"`
	// FireAt is a timer's fire time (instead of TimeoutSeconds).
	FireAt *time.Time `json:"fireAt,omitempty"`
}

// Create makes a waitpoint; with an idempotency key a repeat returns the
// first and created=false (without a callback URL: its secret is only
// known once).
func (s *Service) Create(ctx context.Context, req CreateRequest) (Waitpoint, bool, error) {
	if err := validateCreate(&req); err != nil {
		return Waitpoint{}, false, err
	}
	now := s.now()
	w := Waitpoint{
		Project: req.Project, Env: req.Env, RunID: req.RunID, Kind: req.Kind, Status: StatusWaiting,
		DisplayText: req.DisplayText, Schema: req.Schema, Tags: req.Tags, IdempotencyKey: req.IdempotencyKey,
		CreatedAt: now,
	}
	switch {
	case req.FireAt != nil:
		t := req.FireAt.UTC()
		w.TimeoutAt = &t
	case req.TimeoutSeconds > 0:
		t := now.Add(time.Duration(req.TimeoutSeconds * float64(time.Second)))
		w.TimeoutAt = &t
	}
	var secret string
	if w.Kind != KindTimer {
		secret = newSecret()
		w.CallbackHash = hashSecret(secret)
	}
	got, created, err := s.store.CreateWaitpoint(ctx, w)
	if err != nil {
		return Waitpoint{}, false, fmt.Errorf("create waitpoint: %w", err)
	}
	if created && secret != "" {
		got.CallbackURL = s.callbackURL(got.ID, secret)
	}
	return got, created, nil
}

func validateCreate(req *CreateRequest) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, a...), errdefs.ErrInvalid)
	}
	if !req.Kind.Valid() || req.Kind == KindRuns {
		return bad("unknown kind %q (human, token or timer)", req.Kind)
	}
	if req.Kind == KindHuman && strings.TrimSpace(req.DisplayText) == "" {
		return bad("a human wait needs a displayText")
	}
	if len(req.DisplayText) > MaxDisplayTextBytes {
		return bad("displayText is longer than %d bytes", MaxDisplayTextBytes)
	}
	if len(req.Schema) > 0 {
		if req.Kind != KindHuman {
			return bad("only a human wait takes a schema")
		}
		if len(req.Schema) > MaxSchemaBytes {
			return bad("schema is longer than %d bytes", MaxSchemaBytes)
		}
		var obj map[string]any
		if err := json.Unmarshal(req.Schema, &obj); err != nil || obj == nil {
			return bad("schema must be a JSON object (a JSON Schema)")
		}
		if err := checkSchema(obj); err != nil {
			return bad("schema: %v", err)
		}
	}
	if len(req.Tags) > MaxTags {
		return bad("more than %d tags", MaxTags)
	}
	for _, t := range req.Tags {
		if t == "" || len(t) > MaxTagLength {
			return bad("tag %q must be 1-%d bytes", t, MaxTagLength)
		}
	}
	if req.Tags == nil {
		req.Tags = []string{}
	}
	if len(req.IdempotencyKey) > MaxKeyLength {
		return bad("idempotencyKey is longer than %d characters", MaxKeyLength)
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > MaxTimeout.Seconds() || req.TimeoutSeconds != req.TimeoutSeconds {
		return bad("timeoutSeconds must be between 0 and %d", int(MaxTimeout.Seconds()))
	}
	if req.Kind == KindTimer && req.FireAt == nil && req.TimeoutSeconds <= 0 {
		return bad("a timer needs a fireAt or a positive timeoutSeconds")
	}
	if req.FireAt != nil && req.Kind != KindTimer {
		return bad("only a timer takes fireAt (tokens and human waits take timeoutSeconds)")
	}
	return nil
}

// Get returns a waitpoint.
func (s *Service) Get(ctx context.Context, id string) (Waitpoint, error) {
	return s.store.GetWaitpoint(ctx, id)
}

// List returns a page of waitpoints.
func (s *Service) List(ctx context.Context, f Filter) (Page, error) {
	if f.Status != "" && !f.Status.Valid() {
		return Page{}, fmt.Errorf("unknown status %q (WAITING, COMPLETED, TIMED_OUT or CANCELED): %w", f.Status, errdefs.ErrInvalid)
	}
	return s.store.ListWaitpoints(ctx, f)
}

// Complete completes a waiting waitpoint with data (JSON; empty is null). Completing again with the same data returns it
// unchanged; with other data, or a waitpoint canceled or timed out, is
// errdefs.ErrConflict. A human wait's data must fit its schema (see checkData).
func (s *Service) Complete(ctx context.Context, id string, data json.RawMessage) (Waitpoint, error) {
	w, err := s.Get(ctx, id)
	if err != nil {
		return Waitpoint{}, err
	}
	return s.complete(ctx, w, data)
}

func (s *Service) complete(ctx context.Context, w Waitpoint, data json.RawMessage) (Waitpoint, error) {
	if w.Kind == KindTimer {
		return Waitpoint{}, fmt.Errorf("waitpoint %s is a timer: it completes when it fires (cancel it to end it early): %w", w.ID, errdefs.ErrInvalid)
	}
	if w.Kind == KindRuns {
		return Waitpoint{}, fmt.Errorf("waitpoint %s waits for child runs: it completes when they end (cancel it to end it early): %w", w.ID, errdefs.ErrInvalid)
	}
	canon, err := canonical(data)
	if err != nil {
		return Waitpoint{}, err
	}
	if len(w.Schema) > 0 {
		if err := checkData(w.Schema, canon); err != nil {
			return Waitpoint{}, fmt.Errorf("data for waitpoint %s does not match its schema: %v: %w", w.ID, err, errdefs.ErrInvalid)
		}
	}
	return s.resolve(ctx, w.ID, Resolution{Status: StatusCompleted, Data: canon, Time: s.now()})
}

// Cancel cancels a waiting waitpoint; the waiting task
// gets a canceled result with reason. Canceling a canceled waitpoint
// returns it; one completed or timed out is errdefs.ErrConflict.
func (s *Service) Cancel(ctx context.Context, id, reason string) (Waitpoint, error) {
	w, err := s.Get(ctx, id)
	if err != nil {
		return Waitpoint{}, err
	}
	return s.cancel(ctx, w, reason)
}

func (s *Service) cancel(ctx context.Context, w Waitpoint, reason string) (Waitpoint, error) {
	if len(reason) > MaxDisplayTextBytes {
		return Waitpoint{}, fmt.Errorf("reason is longer than %d bytes: %w", MaxDisplayTextBytes, errdefs.ErrInvalid)
	}
	if w.Status == StatusCanceled {
		return w, nil
	}
	return s.resolve(ctx, w.ID, Resolution{Status: StatusCanceled, Reason: reason, Time: s.now()})
}

// resolve applies r and wakes the waitpoint's waiters.
func (s *Service) resolve(ctx context.Context, id string, r Resolution) (Waitpoint, error) {
	w, changed, err := s.store.ResolveWaitpoint(ctx, id, r)
	if err != nil {
		return Waitpoint{}, err
	}
	if changed {
		s.publish(id)
		if s.Resolved != nil {
			s.Resolved(ctx, w)
		}
	}
	return w, nil
}

// Callback completes waitpoint id with body when secret is its callback
// secret. A wrong secret is errdefs.ErrNotFound, like an unknown id, so the
// endpoint tells nothing to whoever guesses.
func (s *Service) Callback(ctx context.Context, id, secret string, body json.RawMessage) (Waitpoint, error) {
	w, err := s.store.GetWaitpoint(ctx, id)
	if err != nil {
		return Waitpoint{}, err
	}
	if w.CallbackHash == "" || subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(w.CallbackHash)) != 1 {
		return Waitpoint{}, fmt.Errorf("waitpoint %s with this callback secret: %w", id, errdefs.ErrNotFound)
	}
	return s.complete(ctx, w, body)
}

// humanWait returns the one human waitpoint run id waits on.
func (s *Service) humanWait(ctx context.Context, runID string) (Waitpoint, error) {
	r, err := s.runs.Get(ctx, runID)
	if err != nil {
		return Waitpoint{}, err
	}
	page, err := s.store.ListWaitpoints(ctx, Filter{Project: r.Project, Env: r.Env, RunID: runID, Status: StatusWaiting, Waited: true, Limit: 100})
	if err != nil {
		return Waitpoint{}, err
	}
	var found []Waitpoint
	for _, w := range page.Waitpoints {
		if w.Kind == KindHuman {
			found = append(found, w)
		}
	}
	switch len(found) {
	case 0:
		return Waitpoint{}, fmt.Errorf("run %s (%s) is not waiting for a human: %w", runID, r.Status, errdefs.ErrConflict)
	case 1:
		return found[0], nil
	}
	ids := make([]string, len(found))
	for i, w := range found {
		ids[i] = w.ID
	}
	return Waitpoint{}, fmt.Errorf("run %s waits for %d humans (%s): complete one with helmr token complete: %w",
		runID, len(found), strings.Join(ids, ", "), errdefs.ErrConflict)
}

// Approve completes the human wait run id is waiting on with data.
func (s *Service) Approve(ctx context.Context, runID string, data json.RawMessage) (Waitpoint, error) {
	w, err := s.humanWait(ctx, runID)
	if err != nil {
		return Waitpoint{}, err
	}
	return s.complete(ctx, w, data)
}

// Reject cancels the human wait run id is waiting on: the task gets
// {ok:false, canceled:true, reason} (reason "rejected" when empty).
func (s *Service) Reject(ctx context.Context, runID, reason string) (Waitpoint, error) {
	w, err := s.humanWait(ctx, runID)
	if err != nil {
		return Waitpoint{}, err
	}
	if reason == "" {
		reason = "rejected"
	}
	return s.cancel(ctx, w, reason)
}

// CancelForRun cancels the waiting waitpoints of a run that ended: nothing
// will wait on them any more.
func (s *Service) CancelForRun(ctx context.Context, r runs.Run) error {
	return s.cancelWaits(ctx, r, "the run ended ("+string(r.Status)+")")
}

// CancelForRetry cancels the waits of the attempt of r that was given up
// (its worker lost, or its task failed): its next attempt waits anew,
// and an approval must reach that wait, not a dead one.
func (s *Service) CancelForRetry(ctx context.Context, r runs.Run) error {
	return s.cancelWaits(ctx, r, fmt.Sprintf("attempt %d of the run was given up; attempt %d waits anew", max(r.Attempt-1, 1), r.Attempt))
}

func (s *Service) cancelWaits(ctx context.Context, r runs.Run, reason string) error {
	page, err := s.store.ListWaitpoints(ctx, Filter{Project: r.Project, Env: r.Env, RunID: r.ID, Status: StatusWaiting, Limit: 1000})
	if err != nil {
		return err
	}
	var errs []error
	for _, w := range page.Waitpoints {
		_, err := s.resolve(ctx, w.ID, Resolution{Status: StatusCanceled, Reason: reason, Time: s.now()})
		if err != nil && !errors.Is(err, errdefs.ErrConflict) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// canonical returns data as compact JSON with object keys sorted (numbers
// kept as written), so that equal data compares equal byte for byte.
func canonical(data json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return json.RawMessage("null"), nil
	}
	if len(data) > MaxDataBytes {
		return nil, fmt.Errorf("data is %d bytes, more than the %d allowed: %w", len(data), MaxDataBytes, errdefs.ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil || dec.More() {
		return nil, fmt.Errorf("data is not valid JSON: %w", errdefs.ErrInvalid)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("data: %v: %w", err, errdefs.ErrInvalid)
	}
	return out, nil
}

func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func hashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

func (s *Service) callbackURL(id, secret string) string {
	base := strings.TrimRight(s.BaseURL, "/")
	return base + "/v1/tokens/" + url.PathEscape(id) + "/callback/" + secret
}
