package httpapi_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
)

// runIDs is the ids of a GET /v1/runs answer.
func runIDs(t *testing.T, body map[string]any) []string {
	t.Helper()
	list, ok := body["runs"].([]any)
	if !ok {
		t.Fatalf("no runs in %v", body)
	}
	var out []string
	for _, r := range list {
		out = append(out, r.(map[string]any)["id"].(string))
	}
	return out
}

// TestListRunsWindowAndIDSearch: since/until bound the creation time,
// id searches by prefix, and a malformed time is a 400 that says why.
func TestListRunsWindowAndIDSearch(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		st, r := e.call("POST", "/v1/tasks/a/runs?project=p&env=dev", `{"payload": 1}`)
		if st != http.StatusCreated {
			t.Fatalf("trigger = %d %v", st, r)
		}
		ids = append(ids, r["id"].(string))
	}
	list := func(q url.Values) (int, map[string]any) {
		q.Set("project", "p")
		q.Set("env", "dev")
		return e.call("GET", "/v1/runs?"+q.Encode(), nil)
	}
	st, body := list(url.Values{"id": {ids[1]}})
	if got := runIDs(t, body); st != http.StatusOK || len(got) != 1 || got[0] != ids[1] {
		t.Errorf("GET /v1/runs?id=%s = %d %v, want [%s]", ids[1], st, got, ids[1])
	}
	st, body = list(url.Values{"id": {"run_nothing_like_it"}})
	if got := runIDs(t, body); st != http.StatusOK || len(got) != 0 {
		t.Errorf("GET /v1/runs?id=run_nothing_like_it = %d %v, want none", st, got)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	st, body = list(url.Values{"since": {future}})
	if got := runIDs(t, body); st != http.StatusOK || len(got) != 0 {
		t.Errorf("GET /v1/runs?since=%s = %d %v, want none", future, st, got)
	}
	st, body = list(url.Values{"since": {past}, "until": {future}})
	if got := runIDs(t, body); st != http.StatusOK || len(got) != 3 {
		t.Errorf("GET /v1/runs?since=%s&until=%s = %d %v, want all 3", past, future, st, got)
	}
	st, body = list(url.Values{"until": {past}})
	if got := runIDs(t, body); st != http.StatusOK || len(got) != 0 {
		t.Errorf("GET /v1/runs?until=%s = %d %v, want none", past, st, got)
	}
	if st, body := list(url.Values{"since": {"yesterday"}}); st != http.StatusBadRequest {
		t.Errorf("GET /v1/runs?since=yesterday = %d %v, want 400", st, body)
	}
}

// TestListProjects: the owner sees every deployed project environment,
// a key only its own.
func TestListProjects(t *testing.T) {
	e := newAPI(t)
	for _, env := range []string{"dev", "prod"} {
		d := deployment(goodTask("a"))
		d["env"] = env
		if st, body := e.call("POST", "/v1/deployments", d); st != http.StatusCreated {
			t.Fatalf("deploy to %s = %d %v", env, st, body)
		}
	}
	st, body := e.call("GET", "/v1/projects", nil)
	envs, _ := body["environments"].([]any)
	if st != http.StatusOK || len(envs) != 2 {
		t.Fatalf("GET /v1/projects as the owner = %d %v, want p/dev and p/prod", st, body)
	}
	key, _ := e.key("q", "staging", apikeys.TasksRead)
	st, body = e.call("GET", "/v1/projects", nil, "Authorization", "Bearer "+key)
	envs, _ = body["environments"].([]any)
	if st != http.StatusOK || len(envs) != 1 || envs[0].(map[string]any)["project"] != "q" || envs[0].(map[string]any)["env"] != "staging" {
		t.Errorf("GET /v1/projects with a q/staging key = %d %v, want only q/staging", st, body)
	}
}

// page gets a console page with the owner credential.
func (e *apiEnv) htmlPage(path string, header ...string) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.owner)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestConsoleRunsPage: the runs list through the real API: the runs of
// the project environment, the id search, the selector of deployed
// project environments.
func TestConsoleRunsPage(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	var ids []string
	for i := 0; i < 2; i++ {
		st, r := e.call("POST", "/v1/tasks/a/runs?project=p&env=dev", `{"payload": 1}`)
		if st != http.StatusCreated {
			t.Fatalf("trigger = %d %v", st, r)
		}
		ids = append(ids, r["id"].(string))
	}
	st, body := e.htmlPage("/runs")
	if st != http.StatusOK || !strings.Contains(body, ids[0]) || !strings.Contains(body, ids[1]) || !strings.Contains(body, `<option value="p/dev" selected>`) {
		t.Fatalf("GET /runs = %d %s", st, body)
	}
	st, body = e.htmlPage("/runs?project=p&env=dev&window=1h&id=" + ids[1])
	if st != http.StatusOK || strings.Contains(body, ids[0]) || !strings.Contains(body, ids[1]) {
		t.Errorf("GET /runs?id=%s = %d, want only that run: %s", ids[1], st, body)
	}
	st, body = e.htmlPage("/runs?project=p&env=dev", "X-Helmr-Fragment", "rows")
	if st != http.StatusOK || strings.Contains(body, "<html") || !strings.Contains(body, ids[0]) {
		t.Errorf("GET /runs rows fragment = %d %s", st, body)
	}
}

// TestTriggerReplayOf: a replay names its original, which must be a run
// of the same task and project environment.
func TestTriggerReplayOf(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"), goodTask("b"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	st, orig := e.call("POST", "/v1/tasks/a/runs?project=p&env=dev", `{"payload": 1}`)
	if st != http.StatusCreated {
		t.Fatalf("trigger = %d %v", st, orig)
	}
	id := orig["id"].(string)
	st, re := e.call("POST", "/v1/tasks/a/runs?project=p&env=dev", map[string]any{"payload": 2, "replayOf": id})
	if st != http.StatusCreated || re["replayOf"] != id {
		t.Fatalf("replay = %d %v, want replayOf %s", st, re, id)
	}
	if st, got := e.call("GET", "/v1/runs/"+re["id"].(string), nil); st != http.StatusOK || got["replayOf"] != id {
		t.Errorf("GET the replay = %d %v, want replayOf %s", st, got, id)
	}
	for _, c := range []struct{ task, of string }{{"b", id}, {"a", "run_missing"}} {
		if st, body := e.call("POST", "/v1/tasks/"+c.task+"/runs?project=p&env=dev", map[string]any{"replayOf": c.of}); st != http.StatusBadRequest && st != http.StatusUnprocessableEntity {
			t.Errorf("trigger %s replaying %s = %d %v, want refused", c.task, c.of, st, body)
		}
	}
}

// TestConsoleRunPage: a waiting run's page through the real API: its
// state, its payload as text, the human wait with approve and reject; a
// run of another project environment is not found.
func TestConsoleRunPage(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	id, wp := e.waitingRun(t)
	st, body := e.htmlPage("/runs/" + id)
	if st != http.StatusOK {
		t.Fatalf("GET /runs/%s = %d %s", id, st, body)
	}
	for _, want := range []string{id, "WAITING", wp, "ok?", `form class="approve"`, `form class="reject"`, `id="cancel"`, "process"} {
		if !strings.Contains(body, want) {
			t.Errorf("the run page lacks %q", want)
		}
	}
	key, _ := e.key("q", "dev", apikeys.RunsRead)
	if st, _ := e.htmlPage("/runs/"+id, "Authorization", "Bearer "+key); st != http.StatusNotFound {
		t.Errorf("GET /runs/%s with a key of q/dev = %d, want 404", id, st)
	}
	if st, _ := e.htmlPage("/runs/run_missing"); st != http.StatusNotFound {
		t.Errorf("GET /runs/run_missing = %d, want 404", st)
	}
}

// TestConsoleApprovalsAndTokens: through the real API the inbox lists
// waiting human waits (not tokens) and the tokens page filters by kind;
// an approval answered through the API leaves the inbox.
func TestConsoleApprovalsAndTokens(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	run, wp := e.waitingRun(t)
	st, tok := e.call("POST", "/v1/tokens?project=p&env=dev", `{"tags": ["ci"]}`)
	if st != http.StatusCreated {
		t.Fatalf("create token = %d %v", st, tok)
	}
	tokID := tok["id"].(string)
	st, body := e.htmlPage("/approvals?project=p&env=dev")
	if st != http.StatusOK || !strings.Contains(body, wp) || !strings.Contains(body, run) || strings.Contains(body, tokID) {
		t.Errorf("GET /approvals = %d, want %s of %s and not token %s: %s", st, wp, run, tokID, body)
	}
	st, body = e.htmlPage("/tokens?project=p&env=dev&kind=token")
	if st != http.StatusOK || !strings.Contains(body, tokID) || strings.Contains(body, wp) || !strings.Contains(body, `form class="complete"`) {
		t.Errorf("GET /tokens?kind=token = %d, want %s only: %s", st, tokID, body)
	}
	if st, body := e.call("POST", "/v1/runs/"+run+"/approve", `{}`, "X-Helmr-CSRF", "1"); st != http.StatusOK {
		t.Fatalf("approve = %d %v", st, body)
	}
	if _, body := e.htmlPage("/approvals?project=p&env=dev"); strings.Contains(body, wp) {
		t.Errorf("the answered approval %s is still in the inbox", wp)
	}
	if st, body := e.call("GET", "/v1/tokens?project=p&env=dev&kind=robot", nil); st != http.StatusBadRequest {
		t.Errorf("GET /v1/tokens?kind=robot = %d %v, want 400", st, body)
	}
}

// TestConsoleTestPage: through the real API the test page lists the
// deployed tasks and offers the last payload of the chosen one.
func TestConsoleTestPage(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"), goodTask("b"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	if st, r := e.call("POST", "/v1/tasks/a/runs?project=p&env=dev", `{"payload": {"note": "<b>hi</b>"}}`); st != http.StatusCreated {
		t.Fatalf("trigger = %d %v", st, r)
	}
	st, body := e.htmlPage("/test?project=p&env=dev&task=a")
	if st != http.StatusOK {
		t.Fatalf("GET /test = %d %s", st, body)
	}
	for _, want := range []string{`<option value="a" selected>`, `<option value="b">`, `id="trigger"`, "&lt;b&gt;hi&lt;/b&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("the test page lacks %s", want)
		}
	}
	if strings.Contains(body, "<b>hi</b>") {
		t.Errorf("a payload reached the test page as HTML")
	}
}
