package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// sessionParams are the params of the session.* and metadata.* requests.
type sessionParams struct {
	After int64           `json:"after"`
	ID    string          `json:"id"`
	Data  json.RawMessage `json:"data"`
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// isSessionRequest reports whether method is served by serveSession.
func isSessionRequest(method string) bool {
	return strings.HasPrefix(method, "session.") || strings.HasPrefix(method, "metadata.")
}

// serveSession answers the adapter's ctx.session and ctx.metadata calls.
func (rw *runWaits) serveSession(ctx context.Context, req adapterRequest) (any, error) {
	var p sessionParams
	if len(req.Params) > 0 {
		if err := json.Unmarshal(req.Params, &p); err != nil {
			return nil, fmt.Errorf("%s: malformed params: %v", req.Method, err)
		}
	}
	cp := rw.w.cfg.Control
	switch req.Method {
	case "session.input.next":
		return rw.nextInput(ctx, p.After)
	case "session.output.append":
		rec, err := cp.AppendOutput(ctx, rw.runID, p.ID, p.Data)
		if err != nil {
			return nil, err
		}
		return map[string]int64{"seq": rec.Seq}, nil
	case "metadata.set":
		return nil, cp.SetMetadata(ctx, rw.runID, p.Key, p.Value)
	}
	return nil, fmt.Errorf("unknown request %q", req.Method)
}

// nextInput waits until the run's input has records after seq after, and
// returns them; it asks the control plane again after each long poll and,
// with a backoff, after errors the control plane may recover from.
func (rw *runWaits) nextInput(ctx context.Context, after int64) (any, error) {
	backoff := 100 * time.Millisecond
	for {
		recs, err := rw.w.cfg.Control.SessionInput(ctx, rw.runID, after)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err == nil && len(recs) > 0:
			return map[string]any{"records": recs}, nil
		case err == nil:
			backoff = 100 * time.Millisecond // none yet (or the run ended: ctx ends soon)
		case errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrInvalid):
			return nil, err
		default:
			rw.w.log.Warn("read session input", "run_id", rw.runID, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		if err != nil {
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}
