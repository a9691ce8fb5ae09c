package runs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
	"github.com/helmr/helmr/internal/vault"
)

// replayEnv is a run service on SQLite with a vault and workspaces, and
// a deployment in p/dev and p/prod: task "plain", and "typed", which
// declares an input ({repo: string}, required) and binds secret GH.
type replayEnv struct {
	svc *runs.Service
	st  *sqlite.Store
}

func newReplayEnv(t testing.TB) replayEnv {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "helmr.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	v, err := vault.Open(ctx, st, bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	svc := runs.NewService(st, st, st, runs.NewBroker(), slog.New(slog.DiscardHandler))
	svc.Vault, svc.Workspaces = v, st
	typed := goodTask("typed")
	typed.Input = json.RawMessage(`{"type": "object", "properties": {"repo": {"type": "string"}}, "required": ["repo"]}`)
	typed.Secrets = map[string]deployments.SecretTarget{"GH": {Env: "GH_TOKEN"}}
	for _, env := range []string{"dev", "prod"} {
		if _, err := v.Set(ctx, "p", env, "gh", []byte("ghp_s3cr3t-value")); err != nil {
			t.Fatal(err)
		}
		if _, err := st.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: env,
			Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{goodTask("plain"), typed}},
			Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}}); err != nil {
			t.Fatal(err)
		}
	}
	return replayEnv{svc: svc, st: st}
}

func (e replayEnv) trigger(t testing.TB, req runs.TriggerRequest) runs.Run {
	t.Helper()
	if req.Project == "" {
		req.Project, req.Env = "p", "dev"
	}
	r, _, err := e.svc.Trigger(context.Background(), req)
	if err != nil {
		t.Fatalf("Trigger(%s) = %v", req.TaskID, err)
	}
	return r
}

func (e replayEnv) count(t *testing.T, env string) int {
	t.Helper()
	page, err := e.svc.List(context.Background(), runs.Filter{Project: "p", Env: env, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Runs)
}

// TestReplay: a replay is a new run of the same task and environment,
// linked by ReplayOf, with the original's payload, secret bindings and run
// options unless the request changes them, in a workspace of its own; an
// edited payload goes through a trigger's checks.
func TestReplay(t *testing.T) {
	e := newReplayEnv(t)
	ctx := context.Background()
	orig := e.trigger(t, runs.TriggerRequest{TaskID: "typed", Payload: json.RawMessage(`{"repo": "a/b"}`),
		Secrets: map[string]string{"GH": "vault:gh"}, Queue: "q1", ConcurrencyKey: "acme", Priority: 7, Tags: []string{"nightly", "team_x"},
		TTL: time.Hour})
	if _, err := e.svc.Cancel(ctx, orig.ID); err != nil {
		t.Fatal(err)
	}

	same, created, err := e.svc.Replay(ctx, orig, runs.ReplayOptions{})
	if err != nil || !created {
		t.Fatalf("Replay(%s) = %v, %v", orig.ID, created, err)
	}
	type view struct {
		TaskID, Env, Queue, Key, Payload string
		Priority                         int
		Tags                             []string
		Secrets                          map[string]string
		Status                           runs.Status
	}
	as := func(r runs.Run) view {
		return view{r.TaskID, r.Env, r.Queue, r.ConcurrencyKey, string(r.Payload), r.Priority, r.Tags, r.Secrets, r.Status}
	}
	want := as(orig)
	want.Status = runs.StatusQueued
	if diff := cmp.Diff(want, as(same)); diff != "" {
		t.Errorf("Replay(%s) differs from its original (-want +got):\n%s", orig.ID, diff)
	}
	if same.ReplayOf != orig.ID || same.ID == orig.ID {
		t.Errorf("replay %s: replayOf %q, want %q", same.ID, same.ReplayOf, orig.ID)
	}
	if same.WorkspaceID == "" || same.WorkspaceID == orig.WorkspaceID {
		t.Errorf("replay workspace %q, original's %q: want a new one", same.WorkspaceID, orig.WorkspaceID)
	}
	if same.ExpiresAt != nil || same.IdempotencyKey != "" {
		t.Errorf("replay expires %v, key %q: a replay takes no ttl or key of its original", same.ExpiresAt, same.IdempotencyKey)
	}

	tags, prio, queue := []string{"rerun"}, 0, ""
	edited, _, err := e.svc.Replay(ctx, orig, runs.ReplayOptions{Payload: json.RawMessage(`{"repo": "c/d"}`), Tags: &tags, Priority: &prio, Queue: &queue})
	if err != nil {
		t.Fatalf("Replay(%s, edited) = %v", orig.ID, err)
	}
	if string(edited.Payload) != `{"repo": "c/d"}` || !slices.Equal(edited.Tags, tags) || edited.Priority != 0 ||
		edited.Queue != runs.TaskQueue("typed") || edited.ConcurrencyKey != "acme" || edited.ReplayOf != orig.ID {
		t.Errorf("edited replay = payload %s tags %v priority %d queue %q key %q, want the edits over the original",
			edited.Payload, edited.Tags, edited.Priority, edited.Queue, edited.ConcurrencyKey)
	}

	// Refused, and nothing stored: a payload that does not fit, one that
	// holds a secret's value, bindings of an undeclared secret.
	before := e.count(t, "dev")
	for name, o := range map[string]runs.ReplayOptions{
		"misfit payload":  {Payload: json.RawMessage(`{"pr": 1}`)},
		"secret payload":  {Payload: json.RawMessage(`{"repo": "ghp_s3cr3t-value"}`)},
		"unknown binding": {Secrets: map[string]string{"NOPE": "vault:gh"}},
		"bad tag":         {Tags: &[]string{"no spaces"}},
	} {
		if _, _, err := e.svc.Replay(ctx, orig, o); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Replay(%s) with a %s = %v, want ErrInvalid", orig.ID, name, err)
		}
	}
	if n := e.count(t, "dev"); n != before {
		t.Errorf("refused replays stored %d runs", n-before)
	}
	if _, _, err := e.svc.Replay(ctx, runs.Run{ID: "run_b", Kind: runs.KindBuild, Project: "p", Env: "dev"}, runs.ReplayOptions{}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Replay(a build run) = %v, want ErrInvalid", err)
	}
}

// TestBulkCancel: a bulk cancel acts on its environment's runs that
// match, a page at a time; runs that ended are skipped, not errors; a dry
// run changes nothing; ids of no run of the environment are not found.
func TestBulkCancel(t *testing.T) {
	e := newReplayEnv(t)
	ctx := context.Background()
	var batch []runs.Run
	for range 5 {
		batch = append(batch, e.trigger(t, runs.TriggerRequest{TaskID: "plain", Tags: []string{"batch_1"}}))
	}
	other := e.trigger(t, runs.TriggerRequest{TaskID: "plain", Tags: []string{"other"}})
	prod := e.trigger(t, runs.TriggerRequest{Project: "p", Env: "prod", TaskID: "plain", Tags: []string{"batch_1"}})
	if _, err := e.svc.Cancel(ctx, batch[0].ID); err != nil {
		t.Fatal(err)
	}

	dry, err := e.svc.BulkCancel(ctx, runs.BulkFilter{Project: "p", Env: "dev", Tag: "batch_1", DryRun: true})
	if err != nil || dry.Matched != 5 || dry.Counts[runs.BulkWouldCancel] != 4 || dry.Counts[runs.BulkSkipped] != 1 || dry.More {
		t.Fatalf("BulkCancel(dry run) = %+v, %v; want 4 would_cancel, 1 skipped", dry, err)
	}
	for _, r := range batch[1:] {
		if cur, _ := e.svc.Get(ctx, r.ID); cur.Status != runs.StatusQueued {
			t.Errorf("after a dry run, run %s is %s", r.ID, cur.Status)
		}
	}

	// Two pages of three: the first cancels three (newest first), the
	// second the last queued one and skips the canceled one.
	f := runs.BulkFilter{Project: "p", Env: "dev", Tag: "batch_1", Limit: 3}
	first, err := e.svc.BulkCancel(ctx, f)
	if err != nil || first.Matched != 3 || first.Counts[runs.BulkCanceled] != 3 || !first.More || first.NextCursor == "" {
		t.Fatalf("BulkCancel(page 1) = %+v, %v", first, err)
	}
	f.Cursor = first.NextCursor
	second, err := e.svc.BulkCancel(ctx, f)
	if err != nil || second.Matched != 2 || second.Counts[runs.BulkCanceled] != 1 || second.Counts[runs.BulkSkipped] != 1 || second.More {
		t.Fatalf("BulkCancel(page 2) = %+v, %v", second, err)
	}
	for _, it := range second.Runs {
		if it.Action == runs.BulkSkipped && (it.RunID != batch[0].ID || !strings.Contains(it.Reason, "CANCELED")) {
			t.Errorf("skipped %+v, want %s, already CANCELED", it, batch[0].ID)
		}
	}
	for _, r := range batch {
		if cur, _ := e.svc.Get(ctx, r.ID); cur.Status != runs.StatusCanceled {
			t.Errorf("run %s is %s, want CANCELED", r.ID, cur.Status)
		}
	}
	for _, r := range []runs.Run{other, prod} {
		if cur, _ := e.svc.Get(ctx, r.ID); cur.Status != runs.StatusQueued {
			t.Errorf("run %s (%s, tags %v) is %s: the filter does not select it", r.ID, r.Env, r.Tags, cur.Status)
		}
	}

	// ids: another environment's run is not found, exactly as a missing
	// one; a run that does not match the other fields is skipped.
	byIDs, err := e.svc.BulkCancel(ctx, runs.BulkFilter{Project: "p", Env: "dev", Status: runs.StatusQueued,
		IDs: []string{prod.ID, "run_missing", batch[1].ID, other.ID}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, it := range byIDs.Runs {
		got[it.RunID] = it.Action
	}
	wantActions := map[string]string{prod.ID: runs.BulkNotFound, "run_missing": runs.BulkNotFound, batch[1].ID: runs.BulkSkipped, other.ID: runs.BulkCanceled}
	if diff := cmp.Diff(wantActions, got); diff != "" || byIDs.Matched != 1 {
		t.Errorf("BulkCancel(ids) matched %d (-want +got):\n%s", byIDs.Matched, diff)
	}
	if cur, _ := e.svc.Get(ctx, prod.ID); cur.Status != runs.StatusQueued {
		t.Errorf("a bulk cancel of p/dev touched run %s of p/prod: %s", prod.ID, cur.Status)
	}
}

// TestBulkReplay: a bulk replay replays each selected run with the edits
// given, linked to its original; a run whose replay is refused counts as
// failed with the reason, and the others go on.
func TestBulkReplay(t *testing.T) {
	e := newReplayEnv(t)
	ctx := context.Background()
	var origs []runs.Run
	for _, p := range []string{`{"repo": "a/1"}`, `{"repo": "a/2"}`} {
		r := e.trigger(t, runs.TriggerRequest{TaskID: "typed", Payload: json.RawMessage(p), Secrets: map[string]string{"GH": "vault:gh"}, Tags: []string{"fix"}})
		origs = append(origs, r)
	}
	plain := e.trigger(t, runs.TriggerRequest{TaskID: "plain", Payload: json.RawMessage(`3`), Tags: []string{"fix"}})
	for _, r := range append(origs, plain) {
		if _, err := e.svc.Cancel(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	f := runs.BulkFilter{Project: "p", Env: "dev", Tag: "fix", Status: runs.StatusCanceled}
	if _, err := e.svc.BulkReplay(ctx, f, runs.ReplayOptions{WorkspaceID: "ws_x"}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("BulkReplay(workspaceId) = %v, want ErrInvalid", err)
	}
	// The edited payload fits "typed" and is any JSON to "plain".
	res, err := e.svc.BulkReplay(ctx, f, runs.ReplayOptions{Payload: json.RawMessage(`{"repo": "b/b"}`)})
	if err != nil || res.Matched != 3 || res.Counts[runs.BulkReplayed] != 3 {
		t.Fatalf("BulkReplay = %+v, %v; want 3 replayed", res, err)
	}
	for _, it := range res.Runs {
		nr, err := e.svc.Get(ctx, it.NewRunID)
		if err != nil || nr.ReplayOf != it.RunID || string(nr.Payload) != `{"repo": "b/b"}` || nr.Status != runs.StatusQueued {
			t.Errorf("replay %q of %s = %+v, %v", it.NewRunID, it.RunID, nr, err)
		}
	}
	// A payload that does not fit "typed": its runs fail, "plain"'s is
	// replayed.
	res, err = e.svc.BulkReplay(ctx, f, runs.ReplayOptions{Payload: json.RawMessage(`{"pr": 2}`)})
	if err != nil || res.Counts[runs.BulkFailed] != 2 || res.Counts[runs.BulkReplayed] != 1 {
		t.Fatalf("BulkReplay(misfit) = %+v, %v; want 2 failed, 1 replayed", res, err)
	}
	for _, it := range res.Runs {
		if it.Action == runs.BulkFailed && !strings.Contains(it.Reason, "payload") {
			t.Errorf("failed %+v: the reason should name the payload's problem", it)
		}
	}
}

// TestBulkFilterValidate: filters a bulk action refuses.
func TestBulkFilterValidate(t *testing.T) {
	base := runs.BulkFilter{Project: "p", Env: "dev", TaskID: "a"}
	many := make([]string, runs.MaxBulk+1)
	for i := range many {
		many[i] = fmt.Sprintf("run_%d", i)
	}
	now := time.Now()
	for name, mod := range map[string]func(*runs.BulkFilter){
		"no filter":       func(f *runs.BulkFilter) { f.TaskID = "" },
		"no env":          func(f *runs.BulkFilter) { f.Env = "" },
		"unknown status":  func(f *runs.BulkFilter) { f.Status = "DONE" },
		"bad tag":         func(f *runs.BulkFilter) { f.Tag = "a b" },
		"bad queue":       func(f *runs.BulkFilter) { f.Queue = "-q" },
		"since >= until":  func(f *runs.BulkFilter) { f.Since, f.Until = now, now },
		"limit too large": func(f *runs.BulkFilter) { f.Limit = runs.MaxBulk + 1 },
		"negative limit":  func(f *runs.BulkFilter) { f.Limit = -1 },
		"too many ids":    func(f *runs.BulkFilter) { f.IDs = many },
		"duplicate ids":   func(f *runs.BulkFilter) { f.IDs = []string{"run_a", "run_a"} },
		"ids and cursor":  func(f *runs.BulkFilter) { f.IDs, f.Cursor = []string{"run_a"}, "abc" },
	} {
		f := base
		mod(&f)
		if err := f.Validate(); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%s: Validate(%+v) = %v, want ErrInvalid", name, f, err)
		}
	}
	if err := base.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v, want nil", base, err)
	}
}

// BenchmarkBulk measures a bulk cancel and a bulk replay of MaxBulk runs
// on SQLite (the replays of a task that binds a secret: each is checked
// against the vault).
func BenchmarkBulk(b *testing.B) {
	for range b.N {
		b.StopTimer()
		e := newReplayEnv(b)
		ctx := context.Background()
		for range runs.MaxBulk {
			e.trigger(b, runs.TriggerRequest{TaskID: "typed", Payload: json.RawMessage(`{"repo": "a/b"}`), Secrets: map[string]string{"GH": "vault:gh"}, Tags: []string{"x"}})
		}
		f := runs.BulkFilter{Project: "p", Env: "dev", Tag: "x", Limit: runs.MaxBulk}
		b.StartTimer()
		start := time.Now()
		res, err := e.svc.BulkCancel(ctx, f)
		if err != nil || res.Counts[runs.BulkCanceled] != runs.MaxBulk {
			b.Fatalf("BulkCancel = %+v, %v", res.Counts, err)
		}
		mid := time.Now()
		f.Status = runs.StatusCanceled
		res, err = e.svc.BulkReplay(ctx, f, runs.ReplayOptions{})
		if err != nil || res.Counts[runs.BulkReplayed] != runs.MaxBulk {
			b.Fatalf("BulkReplay = %+v, %v", res.Counts, err)
		}
		b.ReportMetric(float64(mid.Sub(start).Milliseconds()), "cancel-ms")
		b.ReportMetric(float64(time.Since(mid).Milliseconds()), "replay-ms")
	}
}
