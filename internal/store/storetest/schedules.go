package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/schedules"
)

var scheduleTests = []storeTest{
	{"ScheduleCreateGetList", testScheduleCreateGetList},
	{"ScheduleDeduplicationKey", testScheduleDedup},
	{"ScheduleUpdateDelete", testScheduleUpdateDelete},
	{"ScheduleClaimOnce", testScheduleClaimOnce},
	{"ScheduleClaimConcurrent", testScheduleClaimConcurrent},
	{"ScheduleRetakeLapsed", testScheduleRetake},
	{"ScheduleSyncDeclared", testScheduleSync},
}

func newSchedule(project, env, task string, next time.Time) schedules.Schedule {
	return schedules.Schedule{Project: project, Env: env, TaskID: task, Type: schedules.TypeImperative,
		Cron: "*/2 * * * * *", Timezone: "UTC", Active: true, NextRunAt: &next, CreatedAt: base, UpdatedAt: base}
}

func mustCreateSchedule(t *testing.T, s Store, sc schedules.Schedule) schedules.Schedule {
	t.Helper()
	got, err := s.CreateSchedule(t.Context(), sc)
	if err != nil {
		t.Fatalf("CreateSchedule(%+v): %v", sc, err)
	}
	return got
}

func testScheduleCreateGetList(t *testing.T, s Store) {
	ctx := t.Context()
	a := newSchedule("p", "dev", "nightly", base.Add(time.Minute))
	a.ExternalID = "tenant-1"
	a = mustCreateSchedule(t, s, a)
	if len(a.ID) != len("sched_")+26 || a.ID[:6] != "sched_" {
		t.Errorf("CreateSchedule() id = %q, want a sched_ id", a.ID)
	}
	got, err := s.GetSchedule(ctx, a.ID)
	if err != nil {
		t.Fatalf("GetSchedule(%q): %v", a.ID, err)
	}
	if d := cmp.Diff(a, got); d != "" {
		t.Errorf("GetSchedule(%q) differs from the created schedule (-created +got):\n%s", a.ID, d)
	}
	if _, err := s.GetSchedule(ctx, "sched_missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSchedule(missing) error = %v, want ErrNotFound", err)
	}
	b := newSchedule("p", "dev", "hourly", base.Add(time.Hour))
	b.CreatedAt = base.Add(time.Second)
	b = mustCreateSchedule(t, s, b)
	mustCreateSchedule(t, s, newSchedule("p", "prod", "nightly", base))
	page, err := s.ListSchedules(ctx, schedules.Filter{Project: "p", Env: "dev", Limit: 1})
	if err != nil || len(page.Schedules) != 1 || page.Schedules[0].ID != b.ID || page.NextCursor == "" {
		t.Fatalf("ListSchedules(p/dev, limit 1) = %+v, %v; want the newer one and a cursor", page, err)
	}
	page, err = s.ListSchedules(ctx, schedules.Filter{Project: "p", Env: "dev", Limit: 1, Cursor: page.NextCursor})
	if err != nil || len(page.Schedules) != 1 || page.Schedules[0].ID != a.ID || page.NextCursor != "" {
		t.Errorf("ListSchedules(p/dev, second page) = %+v, %v; want the older one, no cursor", page, err)
	}
	page, err = s.ListSchedules(ctx, schedules.Filter{Project: "p", Env: "dev", TaskID: "hourly"})
	if err != nil || len(page.Schedules) != 1 || page.Schedules[0].ID != b.ID {
		t.Errorf("ListSchedules(task hourly) = %+v, %v; want one", page, err)
	}
}

func testScheduleDedup(t *testing.T, s Store) {
	ctx := t.Context()
	a := newSchedule("p", "dev", "nightly", base)
	a.DeduplicationKey = "user-42"
	a = mustCreateSchedule(t, s, a)
	b := newSchedule("p", "dev", "other", base)
	b.DeduplicationKey = "user-42"
	if _, err := s.CreateSchedule(ctx, b); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("CreateSchedule(same key) error = %v, want ErrConflict", err)
	}
	got, err := s.GetScheduleByKey(ctx, "p", "dev", "user-42")
	if err != nil || got.ID != a.ID {
		t.Errorf("GetScheduleByKey(user-42) = %s, %v; want %s", got.ID, err, a.ID)
	}
	if _, err := s.GetScheduleByKey(ctx, "p", "prod", "user-42"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetScheduleByKey(other env) error = %v, want ErrNotFound", err)
	}
	c := newSchedule("p", "prod", "nightly", base) // another env may hold the key
	c.DeduplicationKey = "user-42"
	mustCreateSchedule(t, s, c)
}

func testScheduleUpdateDelete(t *testing.T, s Store) {
	ctx := t.Context()
	a := mustCreateSchedule(t, s, newSchedule("p", "dev", "nightly", base))
	later := base.Add(time.Hour)
	got, err := s.UpdateSchedule(ctx, a.ID, func(sc *schedules.Schedule) error {
		sc.Cron, sc.Active, sc.NextRunAt, sc.UpdatedAt = "0 * * * *", false, nil, later
		return nil
	})
	if err != nil || got.Cron != "0 * * * *" || got.Active || got.NextRunAt != nil {
		t.Fatalf("UpdateSchedule() = %+v, %v", got, err)
	}
	if again, _ := s.GetSchedule(ctx, a.ID); again.Active || again.Cron != "0 * * * *" || !again.UpdatedAt.Equal(later) {
		t.Errorf("GetSchedule after update = %+v", again)
	}
	refused := errdefs.Conflictf("no")
	if _, err := s.UpdateSchedule(ctx, a.ID, func(*schedules.Schedule) error { return refused }); !errors.Is(err, refused) {
		t.Errorf("UpdateSchedule(fn fails) error = %v, want fn's", err)
	}
	if _, err := s.UpdateSchedule(ctx, "sched_missing", func(*schedules.Schedule) error { return nil }); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("UpdateSchedule(missing) error = %v, want ErrNotFound", err)
	}
	if err := s.DeleteSchedule(ctx, a.ID); err != nil {
		t.Fatalf("DeleteSchedule: %v", err)
	}
	if err := s.DeleteSchedule(ctx, a.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("DeleteSchedule(again) error = %v, want ErrNotFound", err)
	}
}

func testScheduleClaimOnce(t *testing.T, s Store) {
	ctx := t.Context()
	due := base.Add(2 * time.Second)
	a := mustCreateSchedule(t, s, newSchedule("p", "dev", "nightly", due))
	off := newSchedule("p", "dev", "off", base)
	off.Active = false
	mustCreateSchedule(t, s, off)
	mustCreateSchedule(t, s, newSchedule("p", "dev", "later", base.Add(time.Hour)))
	if next, err := s.NextTick(ctx); err != nil || next == nil || !next.Equal(due) {
		t.Errorf("NextTick() = %v, %v; want %v (inactive schedules do not count)", next, err, due)
	}
	now := base.Add(3 * time.Second)
	list, err := s.DueSchedules(ctx, now, 10)
	if err != nil || len(list) != 1 || list[0].ID != a.ID {
		t.Fatalf("DueSchedules(%v) = %+v, %v; want only %s", now, list, err, a.ID)
	}
	c := schedules.Claim{Due: due, Tick: due, Next: due.Add(2 * time.Second), Until: now.Add(30 * time.Second)}
	got, ok, err := s.ClaimTick(ctx, a.ID, c)
	if err != nil || !ok || !got.NextRunAt.Equal(c.Next) || got.PendingTick == nil || !got.PendingTick.Equal(due) {
		t.Fatalf("ClaimTick() = %+v, %v, %v; want next moved on and the tick pending", got, ok, err)
	}
	if _, ok, err := s.ClaimTick(ctx, a.ID, c); err != nil || ok {
		t.Errorf("ClaimTick(again) = %v, %v; want refused", ok, err)
	}
	if list, _ := s.DueSchedules(ctx, now, 10); len(list) != 0 {
		t.Errorf("DueSchedules after the claim = %+v, want none (the claim has not lapsed)", list)
	}
	o := schedules.Outcome{Tick: due, RunID: "run_1", Time: now}
	if ok, err := s.FinishTick(ctx, a.ID, o); err != nil || !ok {
		t.Fatalf("FinishTick() = %v, %v", ok, err)
	}
	if ok, err := s.FinishTick(ctx, a.ID, o); err != nil || ok {
		t.Errorf("FinishTick(again) = %v, %v; want false", ok, err)
	}
	got, _ = s.GetSchedule(ctx, a.ID)
	if got.PendingTick != nil || got.LastRunAt == nil || !got.LastRunAt.Equal(due) || got.LastRunID != "run_1" {
		t.Errorf("after FinishTick: %+v, want the tick as the last run", got)
	}
}

// testScheduleClaimConcurrent races claimers of one tick: exactly one wins.
func testScheduleClaimConcurrent(t *testing.T, s Store) {
	due := base.Add(2 * time.Second)
	a := mustCreateSchedule(t, s, newSchedule("p", "dev", "nightly", due))
	c := schedules.Claim{Due: due, Tick: due, Next: due.Add(2 * time.Second), Until: due.Add(time.Minute)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 8 {
		wg.Go(func() {
			_, ok, err := s.ClaimTick(t.Context(), a.ID, c)
			if err != nil {
				t.Errorf("ClaimTick: %v", err)
			}
			if ok {
				mu.Lock()
				won++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("8 concurrent ClaimTick of one tick: %d won, want 1", won)
	}
}

func testScheduleRetake(t *testing.T, s Store) {
	ctx := t.Context()
	due := base.Add(2 * time.Second)
	a := mustCreateSchedule(t, s, newSchedule("p", "dev", "nightly", due))
	until := due.Add(30 * time.Second)
	if _, ok, err := s.ClaimTick(ctx, a.ID, schedules.Claim{Due: due, Tick: due, Next: due.Add(time.Hour), Until: until}); !ok || err != nil {
		t.Fatalf("ClaimTick() = %v, %v", ok, err)
	}
	if _, ok, err := s.RetakeTick(ctx, a.ID, due, until.Add(-time.Second), until.Add(time.Minute)); ok || err != nil {
		t.Errorf("RetakeTick(before the claim lapses) = %v, %v; want refused", ok, err)
	}
	lapsed := until.Add(time.Second)
	list, err := s.DueSchedules(ctx, lapsed, 10)
	if err != nil || len(list) != 1 || list[0].PendingTick == nil {
		t.Fatalf("DueSchedules(after the claim lapsed) = %+v, %v; want the pending tick", list, err)
	}
	got, ok, err := s.RetakeTick(ctx, a.ID, due, lapsed, lapsed.Add(30*time.Second))
	if err != nil || !ok || !got.PendingTick.Equal(due) {
		t.Fatalf("RetakeTick(lapsed) = %+v, %v, %v", got, ok, err)
	}
	if _, ok, _ := s.RetakeTick(ctx, a.ID, due, lapsed, lapsed.Add(30*time.Second)); ok {
		t.Errorf("RetakeTick(twice) succeeded, want the second refused")
	}
}

func testScheduleSync(t *testing.T, s Store) {
	ctx := t.Context()
	next := base.Add(time.Minute)
	decl := func(task, cron string) schedules.Declared {
		return schedules.Declared{TaskID: task, Cron: cron, Timezone: "UTC", Next: next}
	}
	res, err := s.SyncDeclared(ctx, "p", "dev", 1, []schedules.Declared{decl("a", "0 * * * *"), decl("b", "0 0 * * *")}, base)
	if err != nil || len(res.Created) != 2 {
		t.Fatalf("SyncDeclared(v1) = %+v, %v; want two created", res, err)
	}
	page, _ := s.ListSchedules(ctx, schedules.Filter{Project: "p", Env: "dev", Type: schedules.TypeDeclarative})
	var bID string
	for _, sc := range page.Schedules {
		if !sc.Active || sc.DeploymentVersion != 1 || sc.NextRunAt == nil || !sc.NextRunAt.Equal(next) {
			t.Errorf("synced schedule %+v, want active, version 1, next %v", sc, next)
		}
		if sc.TaskID == "b" {
			bID = sc.ID
		}
	}
	// A deactivated declarative schedule stays so through deploys.
	if _, err := s.UpdateSchedule(ctx, bID, func(sc *schedules.Schedule) error { sc.Active, sc.NextRunAt = false, nil; return nil }); err != nil {
		t.Fatal(err)
	}
	res, err = s.SyncDeclared(ctx, "p", "dev", 2, []schedules.Declared{decl("b", "30 0 * * *"), decl("c", "0 * * * *")}, base)
	want := schedules.SyncResult{Created: []string{"c"}, Updated: []string{"b"}, Deleted: []string{"a"}}
	if err != nil || !cmp.Equal(res, want) {
		t.Errorf("SyncDeclared(v2) = %+v, %v; want %+v", res, err, want)
	}
	b, _ := s.GetSchedule(ctx, bID)
	if b.Cron != "30 0 * * *" || b.Active || b.NextRunAt != nil || b.DeploymentVersion != 2 {
		t.Errorf("b after v2 = %+v, want the new cron, still inactive", b)
	}
	res, err = s.SyncDeclared(ctx, "p", "dev", 1, nil, base)
	if err != nil || !res.Stale {
		t.Errorf("SyncDeclared(older version) = %+v, %v; want stale", res, err)
	}
	if page, _ := s.ListSchedules(ctx, schedules.Filter{Project: "p", Env: "dev"}); len(page.Schedules) != 2 {
		t.Errorf("after a stale sync: %d schedules, want 2", len(page.Schedules))
	}
	if res, err := s.SyncDeclared(ctx, "p", "dev", 3, nil, base); err != nil || len(res.Deleted) != 2 {
		t.Errorf("SyncDeclared(v3, none) = %+v, %v; want both deleted", res, err)
	}
}
