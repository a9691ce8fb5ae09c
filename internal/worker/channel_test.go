package worker

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/agent/channel"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/waitpoints"
)

// servingControl answers the adapter's requests as a control plane would:
// waits that are over at once, an input record, appends and metadata.
type servingControl struct {
	*fakeControl
	created  []waitpoints.CreateRequest
	children []runs.ChildrenRequest
}

func (c *servingControl) TriggerChildren(_ context.Context, _ string, req runs.ChildrenRequest) (runs.ChildrenResult, error) {
	c.children = append(c.children, req)
	var res runs.ChildrenResult
	for i, it := range req.Items {
		res.Runs = append(res.Runs, runs.ChildRun{ID: "run_c" + string(rune('0'+i)), TaskID: it.TaskID, Created: true})
	}
	if req.Wait {
		res.WaitpointID = "wp_children"
	}
	return res, nil
}

func (c *servingControl) CreateWaitpoint(_ context.Context, _ string, req waitpoints.CreateRequest) (waitpoints.Waitpoint, error) {
	c.created = append(c.created, req)
	return waitpoints.Waitpoint{ID: "wp_1", Kind: req.Kind, Status: waitpoints.StatusWaiting, CallbackURL: "http://cp/cb"}, nil
}

func (c *servingControl) BeginWait(_ context.Context, _, id string) (waitpoints.Waitpoint, error) {
	return waitpoints.Waitpoint{ID: id, Status: waitpoints.StatusCompleted, Data: json.RawMessage(`{"approved":true}`)}, nil
}

func (c *servingControl) EndWait(context.Context, string, string) error { return nil }

func (c *servingControl) SessionInput(_ context.Context, runID string, after int64) ([]runs.Record, error) {
	return []runs.Record{{RunID: runID, Stream: "input", Seq: after + 1, Time: time.Unix(0, 0).UTC(), Data: json.RawMessage(`"hi"`)}}, nil
}

func (c *servingControl) AppendOutput(_ context.Context, runID, _ string, data json.RawMessage) (runs.Record, error) {
	return runs.Record{RunID: runID, Stream: "output", Seq: 1, Data: data}, nil
}

func (c *servingControl) SetMetadata(context.Context, string, string, json.RawMessage) error {
	return nil
}

// TestServesEveryChannelMethod sends the worker each golden request of
// proto/adapter-channel.golden.json: every method of the channel is
// served (none is an unknown request), and answered with a response of
// the request's id.
func TestServesEveryChannelMethod(t *testing.T) {
	data, err := os.ReadFile("../../proto/adapter-channel.golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var goldens map[string][]json.RawMessage
	if err := json.Unmarshal(data, &goldens); err != nil {
		t.Fatal(err)
	}
	cp := &servingControl{fakeControl: &fakeControl{}}
	w := newTestWorker(t, &fakeRuntime{}, cp.fakeControl)
	w.cfg.Control = cp
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rw := newRunWaits(w, "run_1", time.Hour, func() {})
	answers := make(chan []byte, 16)
	rw.send = func(b []byte) error { answers <- b; return nil }
	defer rw.stop()
	defer cancel()

	for _, m := range channel.Methods {
		reqs := goldens["request."+string(m)]
		if len(reqs) == 0 {
			t.Errorf("no golden request of %s", m)
		}
		for _, msg := range reqs {
			var req channel.Request
			if err := json.Unmarshal(msg, &req); err != nil {
				t.Fatal(err)
			}
			rw.handle(ctx, msg)
			var resp channel.Response
			select {
			case b := <-answers:
				if err := json.Unmarshal(b, &resp); err != nil {
					t.Fatalf("answer %s: %v", b, err)
				}
			case <-time.After(time.Minute):
				t.Fatalf("no answer to %s", msg)
			}
			if resp.Type != channel.TypeResponse || resp.ID != req.ID || resp.Error != nil || len(resp.Result) == 0 {
				t.Errorf("answer to %s = %+v (error %+v), want the result of request %d", msg, resp, resp.Error, req.ID)
			}
		}
	}
	// The params reached the control plane as sent.
	human := cp.created[0]
	if human.Kind != waitpoints.KindHuman || human.DisplayText != "Merge the fix?" || human.TimeoutSeconds != 3600 || len(human.Schema) == 0 {
		t.Errorf("wait.human created %+v", human)
	}
	for _, c := range cp.created {
		if c.Kind == waitpoints.KindTimer && c.FireAt != nil && !c.FireAt.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)) {
			t.Errorf("wait.until fires at %v, want 2030-01-02T03:04:05Z", c.FireAt)
		}
	}

	// tasks.*: the items reached the control plane as sent, and only
	// triggerAndWait waits.
	if len(cp.children) != 3 {
		t.Fatalf("tasks.* triggered %d times, want 3", len(cp.children))
	}
	one := cp.children[1]
	if one.Wait || len(one.Items) != 1 || one.Items[0].TaskID != "summarize" || one.Items[0].Options.IdempotencyKey != "sum-a" ||
		one.Items[0].Options.Delay != "1h" || string(one.Items[0].Payload) != `{"file":"a.md"}` {
		t.Errorf("tasks.trigger sent %+v", one)
	}
	if last := cp.children[2]; !last.Wait || len(last.Items) != 2 || last.Items[1].Options.ConcurrencyKey != "tenant-1" {
		t.Errorf("tasks.triggerAndWait sent %+v", last)
	}

	rw.handle(ctx, []byte(`{"type":"request","id":99,"method":"wait.nosuch","params":{}}`))
	var resp channel.Response
	select {
	case b := <-answers:
		json.Unmarshal(b, &resp)
	case <-time.After(time.Minute):
		t.Fatal("no answer to an unknown method")
	}
	if resp.ID != 99 || resp.Error == nil || resp.Error.Message != `unknown request "wait.nosuch"` {
		t.Errorf("an unknown method = %+v, want an error answer", resp)
	}
}
