package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/helmr/helmr/internal/runs"
)

// TestHelloEndToEnd deploys examples/hello with the real CLI, runs it,
// follows its events over SSE with a reconnect, and checks the output, the
// workspace file and the event sequence.
func TestHelloEndToEnd(t *testing.T) { forEachTier(t, testHello) }

func testHello(t *testing.T, tier string) {
	d := startDev(t, tier)
	out := d.mustHelmr("deploy", "examples/hello")
	if !strings.Contains(out, "deployed hello/dev version 1") || !strings.Contains(out, "task hello") {
		t.Fatalf("deploy output = %q, want version 1 with task hello", out)
	}
	r := d.trigger("hello", "hello", `{"name":"e2e"}`)
	if r.Status != runs.StatusQueued {
		t.Errorf("new run status = %s, want QUEUED", r.Status)
	}

	got := followWithReconnect(t, d, r.ID)
	for i, ev := range got {
		if ev.Seq != int64(i+1) {
			t.Fatalf("SSE event %d has seq %d, want %d (lost or repeated events)", i, ev.Seq, i+1)
		}
	}
	stored := d.events(r.ID)
	if diff := cmp.Diff(stored, got); diff != "" {
		t.Errorf("SSE events differ from the stored events (-stored +sse):\n%s", diff)
	}
	wantStatuses := []runs.Status{runs.StatusQueued, runs.StatusStarting, runs.StatusRunning, runs.StatusCompleted}
	if diff := cmp.Diff(wantStatuses, statuses(stored)); diff != "" {
		t.Errorf("status events (-want +got):\n%s", diff)
	}
	lines := strings.Join(logLines(stored), "\n")
	for _, want := range []string{"hello: run " + r.ID, "hello: wrote hello.txt"} {
		if !strings.Contains(lines, want) {
			t.Errorf("logs lack %q; logs:\n%s", want, lines)
		}
	}

	checkStartEvent(t, d, tier, stored)

	final := d.waitDone(r.ID, 10*time.Second)
	if final.Status != runs.StatusCompleted || final.Tier != tier {
		t.Fatalf("run = %s on tier %q (error %+v), want COMPLETED on %s", final.Status, final.Tier, final.Error, tier)
	}
	var output struct {
		Greeting string `json:"greeting"`
		File     string `json:"file"`
		Node     string `json:"node"`
	}
	if err := json.Unmarshal(final.Output, &output); err != nil {
		t.Fatalf("output %s: %v", final.Output, err)
	}
	if output.Greeting != "Hello, e2e!" || output.File != "hello.txt" || !strings.HasPrefix(output.Node, "v22.") {
		t.Errorf("output = %+v, want greeting for e2e from node 22", output)
	}
	data, err := workspaceFile(t, d.dataDir, r.WorkspaceID, "hello.txt")
	if err != nil || string(data) != "Hello, e2e!\n" {
		t.Errorf("workspace hello.txt = %q, %v; want the greeting", data, err)
	}

	// The CLI's own views of the finished run.
	logsOut := d.mustHelmr("logs", r.ID, "-f")
	if !strings.Contains(logsOut, "hello: wrote hello.txt") || !strings.Contains(logsOut, "COMPLETED") {
		t.Errorf("helmr logs -f = %q, want the log lines and the final status", logsOut)
	}
	list := d.mustHelmr("runs", "--project", "hello")
	if !strings.Contains(list, r.ID) || strings.Contains(list, "weak isolation") != (tier == "process") {
		t.Errorf("helmr runs = %q, want the run, flagged as weak isolation exactly on the process tier", list)
	}
	show := d.mustHelmr("runs", "show", r.ID)
	if !strings.Contains(show, "COMPLETED") || !strings.Contains(show, `{"name":"e2e"}`) {
		t.Errorf("helmr runs show = %q, want status and payload", show)
	}
}

// checkStartEvent checks that the run's event for its sandbox's start
// names the tier, and says how strong a boundary it is where that is
// weaker than its kind: the process tier's shared kernel, and a microVM
// under TCG (emulation, not a security boundary), which d's probe of the
// tier tells.
func checkStartEvent(t *testing.T, d *dev, tier string, evs []runs.Event) {
	t.Helper()
	var started *runs.SystemData
	for _, ev := range evs {
		var s runs.SystemData
		if ev.Type == runs.EventSystem && json.Unmarshal(ev.Data, &s) == nil && s.Attrs["sandbox"] != "" {
			started = &s
			break
		}
	}
	if started == nil {
		t.Fatal("no event says where the run's sandbox started")
	}
	tcg := tier == "microvm" && strings.Contains(d.tierDetail, "under TCG")
	want := map[string]string{"tier": tier, "isolation": map[string]string{"process": "weak"}[tier]}
	if tcg {
		want["isolation"] = "none"
	}
	for k, v := range want {
		if started.Attrs[k] != v {
			t.Errorf("start event attr %s = %q, want %q (event %+v)", k, started.Attrs[k], v, started)
		}
	}
	if !strings.Contains(started.Message, "sandbox started on the "+tier+" tier") ||
		strings.Contains(started.Message, "TCG") != tcg || strings.Contains(started.Message, "NOT a security boundary") != tcg {
		t.Errorf("start event %q: want it to name the %s tier, and to say it is emulation (TCG), not a security boundary, exactly when it is (probe: %s)",
			started.Message, tier, d.tierDetail)
	}
}

// followWithReconnect reads the run's SSE stream, drops the connection after
// the first two events, and resumes with Last-Event-ID until the end event.
func followWithReconnect(t *testing.T, d *dev, id string) []runs.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got []runs.Event
	var last int64
	for conn := 0; ; conn++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/v1/runs/"+id+"/events/stream", nil)
		if last > 0 {
			req.Header.Set("Last-Event-ID", strconv.FormatInt(last, 10))
		}
		resp := d.do(req)
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("stream content type = %q", ct)
		}
		end, n := readEvents(t, resp, &got, &last, conn == 0)
		resp.Body.Close()
		if end {
			return got
		}
		if conn == 0 && n != 2 {
			t.Fatalf("first connection delivered %d events before the drop, want 2", n)
		}
		if conn > 3 {
			t.Fatal("stream never ended")
		}
	}
}

// readEvents reads one connection; with drop it returns after two events.
func readEvents(t *testing.T, resp *http.Response, got *[]runs.Event, last *int64, drop bool) (bool, int) {
	sc := bufio.NewScanner(resp.Body)
	var event, data string
	n := 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case line == "" && event == "end":
			return true, n
		case line == "" && data != "":
			var ev runs.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("bad SSE data %q: %v", data, err)
			}
			*got = append(*got, ev)
			*last = ev.Seq
			n++
			event, data = "", ""
			if drop && n == 2 {
				return false, n
			}
		}
	}
	return false, n
}
