package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/agent/channel"
	"github.com/helmr/helmr/internal/errdefs"
)

// serveSession answers the adapter's ctx.session and ctx.metadata calls.
func (rw *runWaits) serveSession(ctx context.Context, req channel.Request) (any, error) {
	cp := rw.w.cfg.Control
	switch req.Method {
	case channel.MethodSessionInputNext:
		var p channel.InputNextParams
		if err := params(req, &p); err != nil {
			return nil, err
		}
		return rw.nextInput(ctx, p.After)
	case channel.MethodSessionOutputAppend:
		var p channel.OutputAppendParams
		if err := params(req, &p); err != nil {
			return nil, err
		}
		rec, err := cp.AppendOutput(ctx, rw.runID, p.ID, p.Data)
		if err != nil {
			return nil, err
		}
		return channel.AppendResult{Seq: rec.Seq}, nil
	case channel.MethodMetadataSet:
		var p channel.MetadataSetParams
		if err := params(req, &p); err != nil {
			return nil, err
		}
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
			return channel.InputRecords{Records: recs}, nil
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
