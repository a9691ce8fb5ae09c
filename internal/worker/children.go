package worker

import (
	"context"
	"fmt"

	"github.com/helmr/helmr/internal/agent/channel"
	"github.com/helmr/helmr/internal/runs"
)

// serveTasks answers tasks.trigger and tasks.triggerAndWait: the control
// plane triggers the children; a wait for them is a wait on the waitpoint
// that completes when they have all ended, so it parks the run like any
// other wait (and the restoring worker answers it, see answer).
func (rw *runWaits) serveTasks(ctx context.Context, req channel.Request) (any, error) {
	var p channel.TriggerParams
	if err := params(req, &p); err != nil {
		return nil, err
	}
	if len(p.Items) == 0 {
		return nil, fmt.Errorf("%s: no runs to trigger", req.Method)
	}
	wait := req.Method == channel.MethodTasksTriggerAndWait
	res, err := rw.w.cfg.Control.TriggerChildren(ctx, rw.runID, runs.ChildrenRequest{Items: p.Items, Wait: wait})
	if err != nil {
		return nil, err
	}
	if !wait {
		return channel.TriggerResult{Runs: res.Runs}, nil
	}
	if res.WaitpointID == "" {
		return nil, fmt.Errorf("%s: the control plane made no waitpoint for the children", req.Method)
	}
	r, err := rw.wait(ctx, res.WaitpointID, 0, req.ID)
	if err != nil {
		return nil, err
	}
	return r, nil
}
