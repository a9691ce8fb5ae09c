package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/runs"
)

// TestBadInput checks that each kind of bad input is one clear error line
// and a non-zero exit, and that nothing reaches the store.
func TestBadInput(t *testing.T) {
	d := startDev(t, "process")
	d.deploy("examples/hello")
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"malformed config", []string{"deploy", "internal/e2e/testdata/badconfig"}, []string{"deployment_build", "helmr.config.ts"}},
		{"module without run", []string{"deploy", "internal/e2e/testdata/norun"}, []string{"deployment_build", `task "norun"`, "run"}},
		{"two tasks with one id", []string{"deploy", "internal/e2e/testdata/dupe"}, []string{"deployment_build", `task id "same"`, "declared twice"}},
		{"reserved workspace", []string{"deploy", "internal/e2e/testdata/reserved"}, []string{"deployment_build", `task "reserved"`, "sandbox.workspace", "/tmp/work", "reserved"}},
		{"missing project dir", []string{"deploy", "internal/e2e/testdata/nope"}, []string{"deployment_build", "helmr.config.ts"}},
		{"payload not JSON", []string{"run", "hello", "--project", "hello", "--payload-json", "{nope"}, []string{"--payload-json is not valid JSON"}},
		{"unknown task", []string{"run", "nope", "--project", "hello"}, []string{"not found", `"nope"`}},
		{"unknown run", []string{"runs", "show", "run_nope"}, []string{"not found"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := d.helmr(c.args...)
			if code == 0 {
				t.Fatalf("helmr %v exited 0; stdout %q", c.args, out)
			}
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "helmr: ") {
				t.Errorf("last stderr line = %q, want one 'helmr: ...' error line", last)
			}
			for _, w := range c.want {
				if !strings.Contains(last, w) {
					t.Errorf("error %q lacks %q", last, w)
				}
			}
		})
	}
	t.Run("API payload not JSON", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, d.url+"/v1/tasks/hello/runs?project=hello", strings.NewReader(`{"payload": {bad}`))
		resp := d.do(req)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("status = %d, want 400", resp.StatusCode)
		}
	})
	// Nothing of the failures reached the store.
	ctx := context.Background()
	for _, project := range []string{"badconfig", "norun", "dupe", "reserved"} {
		if ts, err := d.api.ListTasks(ctx, project, "dev"); err != nil || len(ts) != 0 {
			t.Errorf("project %s has tasks %v (err %v) after a failed deploy", project, ts, err)
		}
	}
	page, err := d.api.ListRuns(ctx, "hello", "dev", runs.Filter{Limit: 100})
	if err != nil || len(page.Runs) != 0 {
		t.Errorf("runs after bad input = %d (err %v), want 0", len(page.Runs), err)
	}
}
