package httpapi_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/deployments"
)

func TestSchedulesAPI(t *testing.T) {
	e := newAPI(t)
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	body := `{"task": "a", "cron": "0 9 * * 1-5", "timezone": "Europe/Paris", "externalId": "team-1", "deduplicationKey": "team-1-standup"}`
	st, a := e.call("POST", "/v1/schedules?project=p&env=dev", body)
	if st != http.StatusCreated || a["type"] != "IMPERATIVE" || a["active"] != true || a["nextRunAt"] == nil || a["timezone"] != "Europe/Paris" {
		t.Fatalf("create = %d %v", st, a)
	}
	id := a["id"].(string)
	st, again := e.call("POST", "/v1/schedules?project=p&env=dev", strings.Replace(body, "0 9", "30 9", 1))
	if st != http.StatusOK || again["id"] != id || again["cron"] != "30 9 * * 1-5" {
		t.Errorf("create with the same deduplication key = %d %v, want 200 and %s updated", st, again, id)
	}
	for _, c := range []struct{ body, want string }{
		{`{"task": "a", "cron": "0 0 31 2 *"}`, "never fires"},
		{`{"task": "a", "cron": "0 * * * *", "timezone": "Moon/Base"}`, "timezone"},
		{`{"task": "nope", "cron": "0 * * * *"}`, "not deployed"},
		{`{"task": "a", "cron": "@every 1s"}`, "@every"},
		{`{"task": "a", "cron": "0 * * * *", "extra": 1}`, "unknown field"},
	} {
		st, resp := e.call("POST", "/v1/schedules?project=p&env=dev", c.body)
		if msg := fmt.Sprint(resp["error"]); st != http.StatusBadRequest || !strings.Contains(msg, c.want) {
			t.Errorf("create %s = %d %s, want 400 naming %q", c.body, st, msg, c.want)
		}
	}
	if st, off := e.call("POST", "/v1/schedules/"+id+"/deactivate", nil); st != http.StatusOK || off["active"] != false || off["nextRunAt"] != nil {
		t.Errorf("deactivate = %d %v", st, off)
	}
	if st, up := e.call("PATCH", "/v1/schedules/"+id, `{"externalId": "team-2"}`); st != http.StatusOK || up["externalId"] != "team-2" || up["cron"] != "30 9 * * 1-5" {
		t.Errorf("patch = %d %v", st, up)
	}
	if st, list := e.call("GET", "/v1/schedules?project=p&env=dev&type=IMPERATIVE", nil); st != http.StatusOK || len(list["schedules"].([]any)) != 1 {
		t.Errorf("list = %d %v", st, list)
	}
	if st, _ := e.call("DELETE", "/v1/schedules/"+id, nil); st != http.StatusNoContent {
		t.Errorf("delete = %d", st)
	}
	if st, _ := e.call("GET", "/v1/schedules/"+id, nil); st != http.StatusNotFound {
		t.Errorf("get after delete = %d, want 404", st)
	}
}

// TestDeclaredSchedulesFollowDeploys: a deploy creates a task's declared
// schedule, the next one changes or removes it, and a bad one refuses the
// whole deployment.
func TestDeclaredSchedulesFollowDeploys(t *testing.T) {
	e := newAPI(t)
	nightly := goodTask("a")
	nightly.Schedule = &deployments.ScheduleManifest{Cron: "0 2 * * *", Timezone: "America/New_York"}
	if st, d := e.call("POST", "/v1/deployments", deployment(nightly)); st != http.StatusCreated {
		t.Fatalf("deploy = %d %v", st, d)
	}
	st, list := e.call("GET", "/v1/schedules?project=p&env=dev", nil)
	scheds, _ := list["schedules"].([]any)
	if st != http.StatusOK || len(scheds) != 1 {
		t.Fatalf("schedules after deploy = %d %v, want one", st, list)
	}
	sc := scheds[0].(map[string]any)
	if sc["type"] != "DECLARATIVE" || sc["task"] != "a" || sc["cron"] != "0 2 * * *" || sc["deploymentVersion"] != float64(1) {
		t.Errorf("declared schedule = %v", sc)
	}
	id := sc["id"].(string)
	if st, resp := e.call("DELETE", "/v1/schedules/"+id, nil); st != http.StatusConflict {
		t.Errorf("delete a declarative schedule = %d %v, want 409", st, resp)
	}
	if st, resp := e.call("PATCH", "/v1/schedules/"+id, `{"cron": "* * * * *"}`); st != http.StatusConflict {
		t.Errorf("patch a declarative schedule = %d %v, want 409", st, resp)
	}
	bad := goodTask("a")
	bad.Schedule = &deployments.ScheduleManifest{Cron: "whenever"}
	if st, resp := e.call("POST", "/v1/deployments", deployment(bad)); st != http.StatusUnprocessableEntity || !strings.Contains(fmt.Sprint(resp["error"]), "schedule") {
		t.Errorf("deploy with a bad cron = %d %v, want 422 naming the schedule, as other manifest problems", st, resp)
	}
	nightly.Schedule.Cron = "0 3 * * *"
	if st, d := e.call("POST", "/v1/deployments", deployment(nightly)); st != http.StatusCreated {
		t.Fatalf("redeploy = %d %v", st, d)
	}
	if st, got := e.call("GET", "/v1/schedules/"+id, nil); st != http.StatusOK || got["cron"] != "0 3 * * *" || got["deploymentVersion"] != float64(2) {
		t.Errorf("after a redeploy = %d %v, want the new cron, version 2", st, got)
	}
	if st, d := e.call("POST", "/v1/deployments", deployment(goodTask("a"))); st != http.StatusCreated {
		t.Fatalf("redeploy = %d %v", st, d)
	}
	if st, _ := e.call("GET", "/v1/schedules/"+id, nil); st != http.StatusNotFound {
		t.Errorf("after a deploy without the schedule = %d, want 404", st)
	}
}
