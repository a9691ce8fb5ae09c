package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
)

// blockingBox is a sandbox whose Destroy waits for release.
type blockingBox struct {
	fakeSandbox
	destroying chan struct{}
	release    chan struct{}
	destroyed  *atomic.Bool
}

func (b blockingBox) Destroy(context.Context) error {
	close(b.destroying)
	<-b.release
	b.destroyed.Store(true)
	return nil
}

// TestRunWaitsForIdleRetire: an operations sandbox whose idle timer fires
// is retired by work the worker owns, so Run does not return (and close
// the runtime) while that retirement still runs.
func TestRunWaitsForIdleRetire(t *testing.T) {
	rt := &fakeRuntime{}
	w := newTestWorker(t, rt, &fakeControl{})
	w.cfg.WorkspaceIdle = time.Millisecond
	var destroyed atomic.Bool
	box := blockingBox{fakeSandbox: fakeSandbox{rt}, destroying: make(chan struct{}), release: make(chan struct{}), destroyed: &destroyed}
	ob := &opBox{ws: "ws_1", box: sandbox.Sandbox(box), dir: t.TempDir(), active: 1}
	w.opBoxes[ob.ws] = ob

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()
	w.releaseOpBox(ob) // idle from now: its timer fires at once
	select {
	case <-box.destroying:
	case <-time.After(10 * time.Second):
		t.Fatal("the idle operations sandbox was not retired")
	}
	cancel()
	go func() {
		// Give a Run that does not wait for the retirement the chance to
		// return while it still runs (and fail the check below).
		time.Sleep(100 * time.Millisecond)
		close(box.release)
	}()
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if !destroyed.Load() {
		t.Error("Run returned while the idle sandbox's retirement still ran")
	}
}
