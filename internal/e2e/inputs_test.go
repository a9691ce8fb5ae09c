package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
)

// TestDeclaredInput: a task's declared input is enforced at trigger: a
// payload missing a required field is a 400 naming its path through the
// API, the CLI and a replay, and stores no run; a payload that fits runs
// to COMPLETED. A Standard Schema validator's parse runs in the sandbox
// before run (its default is in the output), and a payload it refuses
// there fails the run without a retry. A schema that does not compile
// fails the deploy, naming the task and field.
func TestDeclaredInput(t *testing.T) {
	d := startDev(t, "process")
	d.deploy("internal/e2e/testdata/inputs")
	ctx := context.Background()

	post := func(task, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, d.url+"/v1/tasks/"+task+"/runs?project=inputs", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp := d.do(req)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	count := func() int {
		page, err := d.api.ListRuns(ctx, "inputs", "dev", runs.Filter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Runs)
	}

	code, body := post("typed", `{"payload": {"pr": 7}}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "payload.repo: missing property") {
		t.Errorf("POST typed {pr: 7} = %d %s, want 400 naming payload.repo", code, body)
	}
	code, body = post("typed", `{"payload": {"repo": "helmr/helmr", "pr": "7"}}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "payload.pr: got string, want integer") {
		t.Errorf("POST typed {pr: \"7\"} = %d %s, want 400 naming payload.pr", code, body)
	}
	out, errOut, exit := d.helmr("run", "typed", "--project", "inputs", "--payload-json", `{"pr": 7}`)
	if exit == 0 || !strings.Contains(errOut, "payload.repo: missing property") {
		t.Errorf("helmr run typed {pr: 7} exited %d: %s%s, want an error naming payload.repo", exit, out, errOut)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d runs stored after refused payloads, want 0", n)
	}

	good := d.trigger("inputs", "typed", `{"repo": "helmr/helmr", "pr": 7}`)
	if r := d.waitDone(good.ID, 2*time.Minute); r.Status != runs.StatusCompleted || string(r.Output) != `"helmr/helmr#7"` {
		t.Fatalf("typed run = %s output %s error %+v, want COMPLETED with \"helmr/helmr#7\"", r.Status, r.Output, r.Error)
	}
	// A replay is a trigger: an edited payload that does not fit is refused.
	code, body = post("typed", `{"payload": {"repo": "helmr/helmr"}, "replayOf": "`+good.ID+`"}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "payload.pr: missing property") {
		t.Errorf("replay with {repo} = %d %s, want 400 naming payload.pr", code, body)
	}

	p := d.trigger("inputs", "parsed", `{"repo": "a"}`)
	r := d.waitDone(p.ID, 2*time.Minute)
	var output map[string]any
	if r.Status != runs.StatusCompleted || json.Unmarshal(r.Output, &output) != nil || output["depth"] != float64(2) || output["parsed"] != true {
		t.Errorf("parsed run = %s output %s error %+v, want COMPLETED with the validator's output (depth 2, parsed)", r.Status, r.Output, r.Error)
	}
	code, body = post("parsed", `{"payload": {"depth": 1}}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "payload.repo: missing property") {
		t.Errorf("POST parsed {depth: 1} = %d %s, want 400 (the validator's JSON Schema applies at trigger)", code, body)
	}
	// A validator stricter than its JSON Schema refuses in the sandbox:
	// the run fails with TaskInputError on its first attempt, no retry.
	rf := d.trigger("inputs", "refined", `{"repo": "noslash"}`)
	r = d.waitDone(rf.ID, 2*time.Minute)
	if r.Status != runs.StatusFailed || r.Error == nil || r.Error.Name != "TaskInputError" || !strings.Contains(r.Error.Message, "payload.repo: want owner/name") || r.Attempt != 1 {
		t.Errorf("refined run = %s attempt %d error %+v, want FAILED with TaskInputError naming payload.repo on attempt 1", r.Status, r.Attempt, r.Error)
	}
	if n := count(); n != 3 {
		t.Errorf("%d runs stored, want the 3 that fit the JSON Schemas", n)
	}

	out, errOut, exit = d.helmr("deploy", "internal/e2e/testdata/inputs-bad")
	last := strings.TrimSpace(errOut)
	if exit == 0 || !strings.Contains(last, "deployment_build") || !strings.Contains(last, `task "bad"`) || !strings.Contains(last, "input") {
		t.Errorf("deploy of a bad input schema exited %d: %s%s, want a deployment_build error naming task \"bad\" and input", exit, out, errOut)
	}
	if ts, err := d.api.ListTasks(ctx, "inputsbad", "dev"); err != nil || len(ts) != 0 {
		t.Errorf("project inputsbad has tasks %v (err %v) after a refused deploy", ts, err)
	}
}
