package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox/network/nettest"
	"github.com/helmr/helmr/internal/testenv"
)

// TestRepoReview runs examples/repo-review against a git server the test
// starts (a test host in a network namespace, serving a repository over
// HTTP): the task clones and reviews it, waits for a person, and writes
// and commits its review only once approved; a rejected review writes
// nothing.
func TestRepoReview(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	testenv.Require(t, err == nil, "git is not installed on this machine (it serves the test's repository)")
	src := t.TempDir()
	repo := filepath.Join(src, "work")
	gitRun := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t.invalid")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	os.MkdirAll(repo, 0o755)
	gitRun(repo, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(repo, "app.js"), []byte("// TODO: handle errors\nconsole.log('hi');\n"), 0o644)
	gitRun(repo, "add", ".")
	gitRun(repo, "commit", "-q", "-m", "first")
	os.WriteFile(filepath.Join(repo, "lib.js"), []byte("export const x = 1; // TODO: name this\n"), 0o644)
	gitRun(repo, "add", ".")
	gitRun(repo, "commit", "-q", "-m", "second")
	gitRun(src, "clone", "-q", "--bare", "work", "repo.git")
	gitRun(filepath.Join(src, "repo.git"), "update-server-info") // dumb HTTP

	host := nettest.NewHost(t)
	port := host.ServeHTTP(t, host.Addr, http.FileServer(http.Dir(src)))
	url := fmt.Sprintf("http://%s:%d/repo.git", host.Addr, port)

	d := startDev(t, "gvisor")
	d.deploy("examples/repo-review")
	reviewRun := func(decide ...string) runs.Run {
		t.Helper()
		r := mustRun(t, d.mustHelmr("run", "repo-review", "--project", "repo-review", "--payload-json", fmt.Sprintf(`{"repoUrl":%q}`, url), "--json"))
		deadline := time.Now().Add(2 * time.Minute)
		for {
			cur, err := d.api.GetRun(context.Background(), r.ID)
			if err == nil && cur.Status == runs.StatusWaiting {
				break
			}
			if err == nil && cur.Status.Terminal() || time.Now().After(deadline) {
				t.Fatalf("run %s = %s %+v, want it WAITING for the review's approval; events %s", r.ID, cur.Status, cur.Error, systemMessages(d.events(r.ID)))
			}
			time.Sleep(200 * time.Millisecond)
		}
		status, body := d.get("/v1/runs/" + r.ID)
		if status != 200 || !strings.Contains(string(body), "Write the review of "+url+" (2 TODOs)") {
			t.Errorf("waiting run = %d %s, want its display text", status, body)
		}
		d.mustHelmr(append(decide, r.ID)...)
		return d.waitDone(r.ID, 2*time.Minute)
	}

	rejected := reviewRun("reject", "--reason", "not now")
	var out struct {
		Written bool
		Todos   int
		Commit  string
	}
	json.Unmarshal(rejected.Output, &out)
	if rejected.Status != runs.StatusCompleted || out.Written || out.Todos != 2 {
		t.Errorf("rejected review = %s %s %+v, want nothing written", rejected.Status, rejected.Output, rejected.Error)
	}
	if _, _, code := d.helmr("exec", rejected.WorkspaceID, "--", "test", "-e", "repo/REVIEW.md"); code == 0 {
		t.Error("a rejected review wrote REVIEW.md")
	}

	approved := reviewRun("approve", "--data-json", `{"approved":true,"note":"LGTM"}`)
	out = struct {
		Written bool
		Todos   int
		Commit  string
	}{}
	json.Unmarshal(approved.Output, &out)
	if approved.Status != runs.StatusCompleted || !out.Written || out.Todos != 2 || out.Commit == "" {
		t.Fatalf("approved review = %s %s %+v", approved.Status, approved.Output, approved.Error)
	}
	review := d.mustHelmr("exec", approved.WorkspaceID, "--", "cat", "repo/REVIEW.md")
	for _, want := range []string{"2 commit(s); 2 TODO(s):", "app.js:1:// TODO: handle errors", "lib.js:1:export const x = 1; // TODO: name this", "LGTM"} {
		if !strings.Contains(review, want) {
			t.Errorf("REVIEW.md lacks %q:\n%s", want, review)
		}
	}
	if log := d.mustHelmr("exec", approved.WorkspaceID, "--", "git", "-C", "repo", "log", "--oneline"); !strings.Contains(log, "Add review") || strings.Count(log, "\n") != 3 {
		t.Errorf("git log in the workspace:\n%s\nwant the review committed on top of the two commits", log)
	}
}
