package schedules_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/schedules"
	"github.com/helmr/helmr/internal/store/sqlite"
)

// clock is a fake clock the test moves by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// fakeRuns triggers runs in memory, deduplicated by idempotency key as
// runs.Service does; fail, when set, answers instead.
type fakeRuns struct {
	mu     sync.Mutex
	byKey  map[string]runs.Run
	order  []runs.TriggerRequest
	fail   error
	crash  bool // make the run, then fail as if the process died
	nextID int
}

func (f *fakeRuns) Trigger(_ context.Context, req runs.TriggerRequest) (runs.Run, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return runs.Run{}, false, f.fail
	}
	if r, ok := f.byKey[req.IdempotencyKey]; ok {
		return r, false, nil
	}
	f.nextID++
	r := runs.Run{ID: fmt.Sprintf("run_%d", f.nextID), TaskID: req.TaskID, Payload: req.Payload}
	f.byKey[req.IdempotencyKey] = r
	f.order = append(f.order, req)
	if f.crash {
		return runs.Run{}, false, errors.New("connection reset")
	}
	return r, true, nil
}

func (f *fakeRuns) made() []schedules.Payload {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []schedules.Payload
	for _, r := range f.order {
		var p schedules.Payload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			panic(err)
		}
		out = append(out, p)
	}
	return out
}

// fakeTasks has the deployed tasks of one project env.
type fakeTasks struct{ tasks []deployments.Task }

func (f *fakeTasks) GetTask(_ context.Context, project, env, id string) (deployments.Task, error) {
	for _, t := range f.tasks {
		if t.ID == id {
			return t, nil
		}
	}
	return deployments.Task{}, fmt.Errorf("task %q: %w", id, errdefs.ErrNotFound)
}

func (f *fakeTasks) CurrentTasks(context.Context, string, string) ([]deployments.Task, error) {
	return f.tasks, nil
}

func (f *fakeTasks) ListEnvironments(context.Context) ([]deployments.Environment, error) {
	return []deployments.Environment{{Project: "p", Env: "dev"}}, nil
}

type harness struct {
	store *sqlite.Store
	clock *clock
	runs  *fakeRuns
	tasks *fakeTasks
	svc   *schedules.Service
}

// t0 is an even second: "*/2 * * * * *" ticks at t0, t0+2s, ...
var t0 = time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC)

func newHarness(t *testing.T) *harness {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "helmr.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &harness{store: st, clock: &clock{t: t0}, runs: &fakeRuns{byKey: map[string]runs.Run{}},
		tasks: &fakeTasks{tasks: []deployments.Task{{ID: "tick", DeploymentVersion: 1}}}}
	h.svc = h.service()
	return h
}

// service is another replica's service over the same store and clock.
func (h *harness) service() *schedules.Service {
	s := schedules.NewService(h.store, h.tasks, h.runs, slog.New(slog.DiscardHandler))
	s.SetClock(h.clock.now)
	return s
}

func (h *harness) create(t *testing.T, req schedules.CreateRequest) schedules.Schedule {
	t.Helper()
	req.Project, req.Env = "p", "dev"
	if req.TaskID == "" {
		req.TaskID = "tick"
	}
	sc, _, err := h.svc.Create(t.Context(), req)
	if err != nil {
		t.Fatalf("Create(%+v): %v", req, err)
	}
	return sc
}

func (h *harness) tick(t *testing.T, s *schedules.Service, at time.Time) int {
	t.Helper()
	h.clock.set(at)
	n, err := s.Tick(t.Context())
	if err != nil {
		t.Fatalf("Tick at %v: %v", at, err)
	}
	return n
}

func TestTickFiresEachTickOnce(t *testing.T) {
	h := newHarness(t)
	sc := h.create(t, schedules.CreateRequest{Cron: "*/2 * * * * *", ExternalID: "tenant-7"})
	if want := t0.Add(2 * time.Second); !sc.NextRunAt.Equal(want) {
		t.Fatalf("new schedule's next tick = %v, want %v", sc.NextRunAt, want)
	}
	if n := h.tick(t, h.svc, t0.Add(time.Second)); n != 0 {
		t.Errorf("Tick before the first tick fired %d runs, want 0", n)
	}
	for i := 1; i <= 5; i++ {
		at := t0.Add(time.Duration(2*i) * time.Second)
		if n := h.tick(t, h.svc, at); n != 1 {
			t.Errorf("Tick at tick %d fired %d runs, want 1", i, n)
		}
		if n := h.tick(t, h.svc, at.Add(500*time.Millisecond)); n != 0 {
			t.Errorf("Tick again within tick %d fired %d runs, want 0", i, n)
		}
	}
	made := h.runs.made()
	if len(made) != 5 {
		t.Fatalf("%d runs made, want 5", len(made))
	}
	for i, p := range made {
		want := t0.Add(time.Duration(2*(i+1)) * time.Second)
		if !p.Timestamp.Equal(want) || p.ScheduleID != sc.ID || p.ExternalID != "tenant-7" || p.Timezone != "UTC" ||
			p.Type != schedules.TypeImperative || len(p.Upcoming) != 5 || !p.Upcoming[0].Equal(want.Add(2*time.Second)) {
			t.Errorf("run %d payload = %+v, want timestamp %v, schedule %s, external id tenant-7", i, p, want, sc.ID)
		}
		switch {
		case i == 0 && p.LastTimestamp != nil:
			t.Errorf("first run's lastTimestamp = %v, want none", p.LastTimestamp)
		case i > 0 && (p.LastTimestamp == nil || !p.LastTimestamp.Equal(made[i-1].Timestamp)):
			t.Errorf("run %d lastTimestamp = %v, want %v", i, p.LastTimestamp, made[i-1].Timestamp)
		}
	}
	got, _ := h.svc.Get(t.Context(), sc.ID)
	if got.LastRunID != "run_5" || got.LastRunAt == nil || !got.LastRunAt.Equal(t0.Add(10*time.Second)) {
		t.Errorf("schedule after 5 ticks = last run %s at %v, want run_5 at t0+10s", got.LastRunID, got.LastRunAt)
	}
}

// TestTickAfterOutageFiresLatestOnce: a control plane down for an hour
// fires the schedule once, for the latest missed tick, not 1,800 times.
func TestTickAfterOutageFiresLatestOnce(t *testing.T) {
	h := newHarness(t)
	h.create(t, schedules.CreateRequest{Cron: "*/2 * * * * *"})
	back := t0.Add(time.Hour + 1500*time.Millisecond)
	if n := h.tick(t, h.svc, back); n != 1 {
		t.Fatalf("Tick after an hour's outage fired %d runs, want 1", n)
	}
	if p := h.runs.made()[0]; !p.Timestamp.Equal(t0.Add(time.Hour)) {
		t.Errorf("the run after the outage is for %v, want the latest missed tick %v", p.Timestamp, t0.Add(time.Hour))
	}
	if n := h.tick(t, h.svc, back); n != 0 {
		t.Errorf("Tick again fired %d runs, want 0", n)
	}
	if n := h.tick(t, h.svc, t0.Add(time.Hour+2*time.Second)); n != 1 {
		t.Errorf("the next tick after the outage fired %d runs, want 1", n)
	}
}

// TestTickReplicasFireOnce: replicas ticking together over one store make
// one run per tick between them.
func TestTickReplicasFireOnce(t *testing.T) {
	h := newHarness(t)
	h.create(t, schedules.CreateRequest{Cron: "*/2 * * * * *"})
	replicas := []*schedules.Service{h.svc, h.service(), h.service()}
	for i := 1; i <= 5; i++ {
		h.clock.set(t0.Add(time.Duration(2*i) * time.Second))
		var wg sync.WaitGroup
		for _, r := range replicas {
			wg.Go(func() {
				if _, err := r.Tick(t.Context()); err != nil {
					t.Errorf("Tick: %v", err)
				}
			})
		}
		wg.Wait()
	}
	if made := h.runs.made(); len(made) != 5 {
		t.Errorf("3 replicas over 5 ticks made %d runs, want 5", len(made))
	}
}

// TestTickCrashBetweenClaimAndRecord: a replica that made the run but
// failed before recording it leaves the tick pending; once its claim
// lapses another replica triggers it again with the same idempotency
// key, which makes no second run.
func TestTickCrashBetweenClaimAndRecord(t *testing.T) {
	h := newHarness(t)
	sc := h.create(t, schedules.CreateRequest{Cron: "0 * * * *"}) // hourly
	tick := t0.Add(time.Hour)
	h.runs.crash = true
	h.tick(t, h.svc, tick)
	h.runs.crash = false
	if got, _ := h.svc.Get(t.Context(), sc.ID); got.LastRunAt != nil || !got.NextRunAt.Equal(tick.Add(time.Hour)) {
		t.Fatalf("after the crash: last %v next %v, want the tick pending and next moved on", got.LastRunAt, got.NextRunAt)
	}
	other := h.service()
	h.tick(t, other, tick.Add(schedules.DefaultLease-time.Second))
	if got, _ := h.svc.Get(t.Context(), sc.ID); got.LastRunAt != nil {
		t.Errorf("the pending tick was taken over before its claim lapsed")
	}
	h.tick(t, other, tick.Add(schedules.DefaultLease+time.Second))
	got, _ := h.svc.Get(t.Context(), sc.ID)
	if got.LastRunAt == nil || !got.LastRunAt.Equal(tick) || got.LastRunID != "run_1" {
		t.Errorf("after the takeover: last run %s at %v, want run_1 at %v", got.LastRunID, got.LastRunAt, tick)
	}
	if made := h.runs.made(); len(made) != 1 {
		t.Errorf("%d runs made for one tick, want 1", len(made))
	}
}

// TestTickTransientAndPermanentFailures: a store outage leaves the tick
// for a retry; a task that is gone is recorded and the schedule goes on.
func TestTickTransientAndPermanentFailures(t *testing.T) {
	h := newHarness(t)
	sc := h.create(t, schedules.CreateRequest{Cron: "0 * * * *"})
	tick := t0.Add(time.Hour)
	h.runs.fail = errors.New("database is down")
	h.tick(t, h.svc, tick)
	h.runs.fail = nil
	if n := h.tick(t, h.svc, tick.Add(schedules.DefaultLease+time.Second)); n != 1 {
		t.Errorf("the retried tick made %d runs, want 1", n)
	}
	h.runs.fail = fmt.Errorf("task %q: %w", "tick", errdefs.ErrNotFound)
	h.tick(t, h.svc, tick.Add(time.Hour))
	got, _ := h.svc.Get(t.Context(), sc.ID)
	if got.LastError == "" || got.PendingTick != nil || !got.NextRunAt.Equal(tick.Add(2*time.Hour)) {
		t.Errorf("after a permanent failure: %+v, want the error recorded and the schedule going on", got)
	}
}

func TestTickInactiveAndReactivated(t *testing.T) {
	h := newHarness(t)
	sc := h.create(t, schedules.CreateRequest{Cron: "*/2 * * * * *"})
	if _, err := h.svc.SetActive(t.Context(), sc.ID, false); err != nil {
		t.Fatal(err)
	}
	if n := h.tick(t, h.svc, t0.Add(time.Minute)); n != 0 {
		t.Errorf("an inactive schedule fired %d runs", n)
	}
	h.clock.set(t0.Add(time.Minute + time.Second))
	got, err := h.svc.SetActive(t.Context(), sc.ID, true)
	if err != nil || !got.NextRunAt.Equal(t0.Add(time.Minute+2*time.Second)) {
		t.Fatalf("SetActive(true) = next %v, %v; want the next tick from now (missed ones do not fire)", got.NextRunAt, err)
	}
	if n := h.tick(t, h.svc, t0.Add(time.Minute+2*time.Second)); n != 1 {
		t.Errorf("the reactivated schedule fired %d runs, want 1", n)
	}
}

func TestCreateDeduplicationKeyUpdates(t *testing.T) {
	h := newHarness(t)
	a := h.create(t, schedules.CreateRequest{Cron: "0 * * * *", DeduplicationKey: "user-1", ExternalID: "u1"})
	b, created, err := h.svc.Create(t.Context(), schedules.CreateRequest{Project: "p", Env: "dev", TaskID: "tick",
		Cron: "*/2 * * * * *", DeduplicationKey: "user-1", ExternalID: "u1b"})
	if err != nil || created || b.ID != a.ID || b.Cron != "*/2 * * * * *" || b.ExternalID != "u1b" || !b.NextRunAt.Equal(t0.Add(2*time.Second)) {
		t.Errorf("Create(same key) = %+v, created %v, %v; want %s updated", b, created, err, a.ID)
	}
	page, _ := h.svc.List(t.Context(), schedules.Filter{Project: "p", Env: "dev"})
	if len(page.Schedules) != 1 {
		t.Errorf("%d schedules after two creates with one key, want 1", len(page.Schedules))
	}
	for _, bad := range []schedules.CreateRequest{
		{TaskID: "missing", Cron: "0 * * * *"},
		{Cron: "nope"},
		{Cron: "0 * * * *", Timezone: "Nowhere/Else"},
	} {
		bad.Project, bad.Env = "p", "dev"
		if bad.TaskID == "" {
			bad.TaskID = "tick"
		}
		if _, _, err := h.svc.Create(t.Context(), bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Create(%+v) error = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestDeclarativeSchedulesFollowDeployments(t *testing.T) {
	h := newHarness(t)
	h.tasks.tasks = []deployments.Task{
		{ID: "nightly", DeploymentVersion: 1, Spec: deployments.TaskManifest{ID: "nightly", HasRun: true,
			Schedule: &deployments.ScheduleManifest{Cron: "0 2 * * *", Timezone: "Europe/Paris"}}},
		{ID: "plain", DeploymentVersion: 1},
	}
	res, err := h.svc.SyncCurrent(t.Context(), "p", "dev")
	if err != nil || len(res.Created) != 1 || res.Created[0] != "nightly" {
		t.Fatalf("SyncCurrent(v1) = %+v, %v; want nightly created", res, err)
	}
	page, _ := h.svc.List(t.Context(), schedules.Filter{Project: "p", Env: "dev"})
	sc := page.Schedules[0]
	if sc.Type != schedules.TypeDeclarative || sc.Timezone != "Europe/Paris" || !sc.NextRunAt.Equal(time.Date(2026, 1, 16, 1, 0, 0, 0, time.UTC)) {
		t.Errorf("declared schedule = %+v, want 02:00 Paris time", sc)
	}
	if err := h.svc.Delete(t.Context(), sc.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Delete(declarative) error = %v, want ErrConflict", err)
	}
	cron := "* * * * *"
	if _, err := h.svc.Update(t.Context(), sc.ID, schedules.UpdateRequest{Cron: &cron}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Update(declarative) error = %v, want ErrConflict", err)
	}
	h.tasks.tasks = []deployments.Task{{ID: "plain", DeploymentVersion: 2}}
	if res, err := h.svc.SyncCurrent(t.Context(), "p", "dev"); err != nil || len(res.Deleted) != 1 {
		t.Errorf("SyncCurrent(v2 without the schedule) = %+v, %v; want it deleted", res, err)
	}
}

func TestValidateManifest(t *testing.T) {
	m := deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{
		{ID: "ok", HasRun: true, Schedule: &deployments.ScheduleManifest{Cron: "*/5 * * * *"}},
		{ID: "norun", Schedule: &deployments.ScheduleManifest{Cron: "*/5 * * * *"}},
		{ID: "badcron", HasRun: true, Schedule: &deployments.ScheduleManifest{Cron: "every day"}},
		{ID: "badzone", HasRun: true, Schedule: &deployments.ScheduleManifest{Cron: "0 * * * *", Timezone: "Atlantis"}},
	}}
	err := schedules.ValidateManifest(m)
	var ve *deployments.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 3 || !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("ValidateManifest() = %v, want 3 problems (norun, badcron, badzone)", err)
	}
}

// TestTickBindsDeclaredSecrets: a scheduled run binds each secret its task
// declares to the vault secret of the same name.
func TestTickBindsDeclaredSecrets(t *testing.T) {
	h := newHarness(t)
	h.tasks.tasks[0].Spec.Secrets = map[string]deployments.SecretTarget{"GITHUB_TOKEN": {Env: "GITHUB_TOKEN"}}
	h.create(t, schedules.CreateRequest{Cron: "*/2 * * * * *"})
	h.tick(t, h.svc, t0.Add(2*time.Second))
	h.runs.mu.Lock()
	defer h.runs.mu.Unlock()
	if len(h.runs.order) != 1 || h.runs.order[0].Secrets["GITHUB_TOKEN"] != "vault:GITHUB_TOKEN" || len(h.runs.order[0].Secrets) != 1 {
		t.Errorf("scheduled trigger = %+v, want GITHUB_TOKEN bound to vault:GITHUB_TOKEN", h.runs.order)
	}
}
