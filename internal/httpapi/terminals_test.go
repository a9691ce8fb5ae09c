package httpapi_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/workspaces"
)

// runTerminals is a remote worker (the HTTP client a `helmr worker`
// uses) serving terminal operations with a fake shell: it echoes the
// keys it reads from the operation's input stream (GET
// /v1/worker/ops/{id}/data) as output, prints "[size CxR]" on a resize,
// and exits with 7 on "exit\r" or when the input ends.
func (e *apiEnv) runTerminals(ctx context.Context) {
	w := client.Worker{C: client.New(e.srv.URL, "wtok")}
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		op, err := w.NextOp(ctx, "wterm", "h-ops")
		if err != nil || op.Terminal == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.FinishOp(context.WithoutCancel(ctx), op.ID, fakeShell(ctx, w, op))
		}()
	}
}

func fakeShell(ctx context.Context, w client.Worker, op workspaces.Op) workspaces.OpResult {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in, err := w.OpInput(ctx, op.ID)
	if err != nil {
		return workspaces.OpResult{Error: err.Error()}
	}
	defer in.Close()
	print := func(s string) error {
		return w.OpOutput(ctx, op.ID, workspaces.OpOutput{Stream: "stdout", Data: base64.StdEncoding.EncodeToString([]byte(s))})
	}
	_ = print(fmt.Sprintf("$ [size %dx%d] ", op.Terminal.Cols, op.Terminal.Rows))
	errExit := fmt.Errorf("exit")
	err = workspaces.ReadTerminalInput(in, func(f workspaces.TerminalInput) error {
		if f.Size != nil {
			return print(fmt.Sprintf("[size %dx%d]", f.Size.Cols, f.Size.Rows))
		}
		if err := print(string(f.Data)); err != nil {
			return err
		}
		if string(f.Data) == "exit\r" {
			return errExit
		}
		return nil
	})
	if err != nil && err != errExit {
		return workspaces.OpResult{Error: err.Error()}
	}
	return workspaces.OpResult{Exec: &workspaces.ExecResult{ExitCode: 7}, Host: "h-ops"}
}

// sseEvent is one server-sent event.
type sseEvent struct {
	id, name, data string
}

// terminalStream reads a terminal's output stream into a channel, from
// lastID (Last-Event-ID) if not empty; the channel closes when it ends.
func (e *apiEnv) terminalStream(t *testing.T, ctx context.Context, path, lastID string) <-chan sseEvent {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path+"/output?project=p&env=dev", nil)
	req.Header.Set("Authorization", "Bearer "+e.owner)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		t.Fatalf("GET %s/output = %d %s, want an event stream", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan sseEvent, 100)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" {
					ch <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.name = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	return ch
}

// readUntil reads output events until their text holds want; it fails
// on the stream's end or after a deadline.
func readUntil(t *testing.T, ch <-chan sseEvent, want string) []sseEvent {
	t.Helper()
	var got []sseEvent
	var text strings.Builder
	deadline := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the output stream ended before %q; got %q", want, text.String())
			}
			got = append(got, ev)
			if ev.name == "output" {
				var out struct{ Data []byte }
				if err := json.Unmarshal([]byte(ev.data), &out); err != nil {
					t.Fatalf("output event data %q: %v", ev.data, err)
				}
				text.Write(out.Data)
			}
			if strings.Contains(text.String(), want) {
				return got
			}
		case <-deadline:
			t.Fatalf("no %q in the output after 20 s; got %q", want, text.String())
		}
	}
}

func TestTerminalThroughRemoteWorker(t *testing.T) {
	e := newAPI(t)
	ws := e.freeWorkspace(t)
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.runTerminals(ctx) }()
	defer func() { stop(); wg.Wait() }()

	base := "/v1/workspaces/" + ws + "/terminals"
	q := "?project=p&env=dev"
	st, term := e.call("POST", base+q, `{"cols": 90, "rows": 20}`)
	if st != http.StatusCreated || term["id"] == "" || term["closed"] != false {
		t.Fatalf("POST %s = %d %v, want 201 with an open terminal", base, st, term)
	}
	path := base + "/" + term["id"].(string)
	out := e.terminalStream(t, ctx, path, "")
	readUntil(t, out, "[size 90x20]")

	// Keys go through the worker's input stream piece by piece (not
	// buffered until the stream ends), output comes back as events.
	if st, body := e.call("POST", path+"/input"+q, "echo hi\r"); st != http.StatusNoContent {
		t.Fatalf("POST input = %d %v", st, body)
	}
	evs := readUntil(t, out, "echo hi\r")
	if st, body := e.call("POST", path+"/resize"+q, `{"cols": 120, "rows": 40}`); st != http.StatusNoContent {
		t.Fatalf("POST resize = %d %v", st, body)
	}
	readUntil(t, out, "[size 120x40]")

	// A reader that resumes gets what came after its last event only.
	last := evs[len(evs)-1].id
	resumed := e.terminalStream(t, ctx, path, last)
	got := readUntil(t, resumed, "[size 120x40]")
	if strings.Contains(got[0].data, base64.StdEncoding.EncodeToString([]byte("echo hi"))) || got[0].id == last {
		t.Errorf("resumed after %s, the first event is %+v: a repeat", last, got[0])
	}

	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", path + "/resize", `{"cols": 0, "rows": 40}`, http.StatusBadRequest},
		{"POST", path + "/resize", `{"cols": 80, "rows": 1001}`, http.StatusBadRequest},
		{"POST", path + "/input", strings.Repeat("x", workspaces.MaxTerminalInput+1), http.StatusRequestEntityTooLarge},
		{"POST", base + q, `{"cols": -1, "rows": 2}`, http.StatusBadRequest},
		{"POST", base + "/term_nope/input", "x", http.StatusNotFound},
		{"GET", base + "/term_nope/output", "", http.StatusNotFound},
	} {
		var body any
		if c.body != "" {
			body = c.body
		}
		p := c.path
		if !strings.Contains(p, "?") {
			p += q
		}
		if st, resp := e.call(c.method, p, body); st != c.want {
			t.Errorf("%s %s = %d %v, want %d", c.method, c.path, st, resp, c.want)
		}
	}

	// Close: the input ends, the shell exits, readers get the end.
	if st, body := e.call("DELETE", path+q, nil); st != http.StatusNoContent {
		t.Fatalf("DELETE = %d %v", st, body)
	}
	for _, ch := range []<-chan sseEvent{out, resumed} {
		var end *sseEvent
		for ev := range ch {
			if ev.name == "end" {
				end = &ev
			}
		}
		if end == nil {
			t.Fatalf("the output stream ended without an end event")
		}
		var final workspaces.Terminal
		if err := json.Unmarshal([]byte(end.data), &final); err != nil || !final.Closed || final.ExitCode == nil || *final.ExitCode != 7 {
			t.Errorf("end event = %s (%v), want closed with exit code 7", end.data, err)
		}
	}
	if st, body := e.call("POST", path+"/input"+q, "more"); st != http.StatusConflict {
		t.Errorf("input after close = %d %v, want 409", st, body)
	}
	st, final := e.call("GET", path+q, nil)
	if st != http.StatusOK || final["closed"] != true {
		t.Errorf("GET a closed terminal = %d %v, want 200 closed", st, final)
	}
	// The trajectory records that it ran, without its keys or output.
	st, traj := e.call("GET", "/v1/workspaces/"+ws+"/trajectory"+q, nil)
	if st != http.StatusOK || !strings.Contains(fmt.Sprint(traj), "terminal") || strings.Contains(fmt.Sprint(traj), "echo hi") {
		t.Errorf("trajectory = %d %v, want a terminal operation without its input", st, traj)
	}
}
