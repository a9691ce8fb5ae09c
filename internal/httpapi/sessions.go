package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

// AppendRequest is the body of POST /v1/runs/{id}/session/input and
// /output (and of the worker's output append).
type AppendRequest struct {
	// Data is the record: any JSON value.
	Data json.RawMessage `json:"data"`
	// IdempotencyKey makes the append idempotent within the stream (or
	// the Idempotency-Key header).
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// appendRecord serves the appends to a run's stream.
func (s *Server) appendRecord(stream string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if _, err := s.visibleRun(r); err != nil {
			return err
		}
		return s.append(w, r, stream)
	}
}

func (s *Server) append(w http.ResponseWriter, r *http.Request, stream string) error {
	var req AppendRequest
	if err := decodeJSON(w, r, runs.MaxRecordBytes+64<<10, &req); err != nil {
		return err
	}
	if len(req.Data) == 0 {
		return errdefs.Invalidf("data is required (any JSON value, null included)")
	}
	key := req.IdempotencyKey
	if h := r.Header.Get("Idempotency-Key"); h != "" {
		if key != "" && key != h {
			return errdefs.Invalidf("the Idempotency-Key header and body field differ")
		}
		key = h
	}
	rec, created, err := s.cfg.Runs.Append(r.Context(), r.PathValue("id"), stream, key, req.Data)
	if err != nil {
		return err
	}
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	return writeJSON(w, status, rec)
}

// streamRecords serves a run's session stream as server-sent events, from
// the cursor in Last-Event-ID (or ?after=): each record's id is its seq.
// The stream ends (event "end") once the run ended and every record was
// sent.
func (s *Server) streamRecords(stream string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		after, err := afterParam(r)
		if cur := r.Header.Get("Last-Event-ID"); cur != "" {
			after, err = cursorParam(cur)
		}
		if err != nil {
			return err
		}
		if _, err := s.visibleRun(r); err != nil {
			return err
		}
		if _, err := s.cfg.Runs.Records(r.Context(), id, stream, after, 1); err != nil {
			return err // a store without session streams fails here, not mid-stream
		}
		flusher, ok := w.(http.Flusher)
		if !ok {
			return fmt.Errorf("streaming unsupported")
		}
		changed, unsubscribe := s.cfg.Runs.Broker().Subscribe(id)
		defer unsubscribe()
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		flusher.Flush()
		s.pumpRecords(w, flusher, r, id, stream, after, changed)
		return nil
	}
}

func (s *Server) pumpRecords(w http.ResponseWriter, f http.Flusher, r *http.Request, id, stream string, after int64, changed <-chan struct{}) {
	const page = 500
	ctx := r.Context()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		run, err := s.cfg.Runs.Get(ctx, id) // before the records: none follows a run's end
		if err != nil {
			return
		}
		recs, err := s.cfg.Runs.Records(ctx, id, stream, after, page)
		if err != nil {
			return
		}
		for _, rec := range recs {
			data, _ := json.Marshal(rec)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: record\ndata: %s\n\n", rec.Seq, data); err != nil {
				return
			}
			after = rec.Seq
		}
		f.Flush()
		if len(recs) == page {
			continue
		}
		if run.Status.Terminal() {
			fmt.Fprint(w, "event: end\ndata: {}\n\n")
			f.Flush()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-poll.C:
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
			f.Flush()
		}
	}
}

// RecordPage is the answer to the worker's read of a run's input.
type RecordPage struct {
	Records []runs.Record `json:"records"`
}

// workerSessionInput long-polls for the records of the run's input after
// ?after=, answering with none once the control plane's bound passed.
func (s *Server) workerSessionInput(w http.ResponseWriter, r *http.Request) error {
	after, err := afterParam(r)
	if err != nil {
		return err
	}
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	recs, err := s.control.SessionInput(r.Context(), r.PathValue("id"), after)
	if err != nil {
		return err
	}
	if recs == nil {
		recs = []runs.Record{}
	}
	return writeJSON(w, http.StatusOK, RecordPage{Records: recs})
}

// workerAppendOutput appends the task's output (ctx.session.output).
func (s *Server) workerAppendOutput(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	return s.append(w, r, runs.StreamOutput)
}

// MetadataRequest is the body of POST /v1/worker/runs/{id}/metadata.
type MetadataRequest struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// workerSetMetadata sets a key of the run's metadata (ctx.metadata.set).
func (s *Server) workerSetMetadata(w http.ResponseWriter, r *http.Request) error {
	var req MetadataRequest
	if err := decodeJSON(w, r, runs.MaxMetadataValueBytes+64<<10, &req); err != nil {
		return err
	}
	if _, err := s.heldRun(r); err != nil {
		return err
	}
	if err := s.cfg.Runs.SetMetadata(r.Context(), r.PathValue("id"), req.Key, req.Value); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
