package e2e

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/testenv"
)

// TestReadmeReview runs the product README's review example
// (testdata/readme-review: its config and task verbatim, with the
// reviewPullRequest it leaves to the reader) on the process tier, as the
// README says: a vault secret bound at run time, then helmr approve with
// {"approved":true} takes the branch that writes review-summary.txt, and
// {"approved":false} does not. A rejected review fails the run with a
// WaitRejectedError; guarded-review, a module of its own (its own copy of
// the SDK), catches the WaitRejectedError and WaitTimeoutError the runtime
// throws.
func TestReadmeReview(t *testing.T) {
	d := startDev(t, "process")
	d.deploy(readmeReviewProject(t))
	const project, display = "github-pr-review", "Post this review to GitHub?"

	cmd := exec.Command(filepath.Join(d.bin, "helmr"), "secret", "set", "OPENAI_API_KEY", "--project", project)
	cmd.Env, cmd.Stdin = d.env, strings.NewReader("sk-readme-review-e2e")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helmr secret set OPENAI_API_KEY: %v: %s", err, out)
	}
	// review starts the README's task and answers its wait with decide.
	review := func(decide ...string) runs.Run {
		t.Helper()
		r := mustRun(t, d.mustHelmr("run", "review-pr", "--project", project, "--payload-json", `{"prNumber":123}`,
			"--secret", "OPENAI_API_KEY=vault:OPENAI_API_KEY", "--json"))
		v := d.waitWaiting(r.ID, time.Minute)
		if len(v.WaitingOn) != 1 || v.WaitingOn[0].Kind != "human" || v.WaitingOn[0].DisplayText != display {
			t.Fatalf("waiting run shows waitingOn %+v, want the human wait %q", v.WaitingOn, display)
		}
		d.mustHelmr(append(decide, r.ID)...)
		return d.waitDone(r.ID, time.Minute)
	}

	t.Run("approved", func(t *testing.T) {
		r := review("approve", "--data-json", `{"approved":true}`)
		if r.Status != runs.StatusCompleted {
			t.Fatalf("approved review = %s %+v, want COMPLETED", r.Status, r.Error)
		}
		got, err := workspaceFile(t, d.dataDir, r.WorkspaceID, "review-summary.txt")
		if want := "Review of PR #123: looks good.\n"; err != nil || string(got) != want {
			t.Errorf("review-summary.txt = %q, %v; want %q (the approved branch)", got, err, want)
		}
	})

	t.Run("not approved", func(t *testing.T) {
		r := review("approve", "--data-json", `{"approved":false}`)
		if r.Status != runs.StatusCompleted {
			t.Fatalf("unapproved review = %s %+v, want COMPLETED", r.Status, r.Error)
		}
		if got, err := workspaceFile(t, d.dataDir, r.WorkspaceID, "review-summary.txt"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("review-summary.txt = %q, %v; want none (the branch not taken)", got, err)
		}
	})

	t.Run("rejected", func(t *testing.T) {
		r := review("reject", "--reason", "not now")
		want := `WaitRejectedError: human wait "` + display + `" was rejected: not now`
		if r.Status != runs.StatusFailed || r.Error == nil || r.Error.Class != runs.ClassTaskProcess || r.Error.Message != want {
			t.Fatalf("rejected review = %s %+v, want FAILED/task_process %q", r.Status, r.Error, want)
		}
	})

	t.Run("caught", func(t *testing.T) {
		cases := []struct {
			name, payload string
			decide        []string // nil: let the wait time out
			want          string
		}{
			{"rejection", `{}`, []string{"reject", "--reason", "not now"},
				`{"message":"human wait \"` + display + `\" was rejected: not now","name":"WaitRejectedError","reason":"not now","rejected":true,"waitError":true}`},
			{"timeout", `{"timeoutSeconds":1}`, nil,
				`{"message":"human wait \"` + display + `\" timed out after 1s","name":"WaitTimeoutError","timedOut":true,"waitError":true}`},
			{"answer", `{}`, []string{"approve", "--data-json", `{"approved":true}`}, `{"approved":true}`},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				r := d.trigger(project, "guarded-review", c.payload)
				if c.decide != nil {
					d.waitWaiting(r.ID, time.Minute)
					d.mustHelmr(append(c.decide, r.ID)...)
				}
				final := d.waitDone(r.ID, time.Minute)
				if got := canonicalJSON(t, final.Output); final.Status != runs.StatusCompleted || got != c.want {
					t.Errorf("guarded-review = %s %s %+v, want COMPLETED with %s", final.Status, got, final.Error, c.want)
				}
			})
		}
	})
}

// readmeReviewProject copies testdata/readme-review to a temporary
// directory with one change: the README's image (node:24-bookworm-slim
// with run steps) becomes the built-in base, since the process tier runs
// no build steps and the test host reaches no registry. The task, its
// sandbox and the config stay as the README has them.
func readmeReviewProject(t *testing.T) string {
	t.Helper()
	src := filepath.Join(testenv.RepoRoot(), "internal", "e2e", "testdata", "readme-review")
	dst := t.TempDir()
	for _, name := range []string{"helmr.config.ts", "package.json", "tasks/review-pr.ts", "tasks/guarded.ts"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "tasks/review-pr.ts" {
			b = []byte(swapReadmeImage(t, string(b)))
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// swapReadmeImage replaces the declaration of base, from its first line
// to the sandbox's, in the README's task module.
func swapReadmeImage(t *testing.T, src string) string {
	t.Helper()
	const from, to = "const base = image(\"repo-agent\")\n.from(\"node:24-bookworm-slim\")\n", "const sbx = sandbox(\"repo-agent\")\n"
	i, j := strings.Index(src, from), strings.Index(src, to)
	if i < 0 || j < i {
		t.Fatalf("tasks/review-pr.ts lacks the README's image declaration (%q up to %q)", from, to)
	}
	return src[:i] + "const base = image(\"repo-agent\").from(\"helmr/bookworm-node22\").workdir(\"/workspace\")\n" + src[j:]
}
