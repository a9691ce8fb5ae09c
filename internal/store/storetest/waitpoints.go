package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/waitpoints"
)

var waitpointTests = []storeTest{
	{"WaitpointCreateGet", testWaitpointCreateGet},
	{"WaitpointIdempotencyKey", testWaitpointIdempotency},
	{"WaitpointListFilters", testWaitpointList},
	{"WaitpointListPagination", testWaitpointPagination},
	{"WaitpointResolve", testWaitpointResolve},
	{"WaitpointDueAndWaited", testWaitpointDue},
}

func newWaitpoint(project, env string, kind waitpoints.Kind) waitpoints.Waitpoint {
	return waitpoints.Waitpoint{Project: project, Env: env, Kind: kind, CreatedAt: base, CallbackHash: "ab12"}
}

func mustCreateWaitpoint(t *testing.T, s Store, w waitpoints.Waitpoint) waitpoints.Waitpoint {
	t.Helper()
	got, created, err := s.CreateWaitpoint(t.Context(), w)
	if err != nil || !created {
		t.Fatalf("CreateWaitpoint(%+v) = %v, %v, want created", w, created, err)
	}
	return got
}

func testWaitpointCreateGet(t *testing.T, s Store) {
	ctx := t.Context()
	timeout := base.Add(time.Hour)
	w := newWaitpoint("p", "dev", waitpoints.KindHuman)
	w.RunID, w.DisplayText, w.Tags, w.TimeoutAt = "run_1", "Ship it?", []string{"a", "b"}, &timeout
	w.Schema = json.RawMessage(`{"type":"object"}`)
	created := mustCreateWaitpoint(t, s, w)
	if len(created.ID) != len("wp_")+26 || created.ID[:3] != "wp_" || created.Status != waitpoints.StatusWaiting {
		t.Errorf("CreateWaitpoint() = id %q status %s, want a wp_ id, WAITING", created.ID, created.Status)
	}
	got, err := s.GetWaitpoint(ctx, created.ID)
	if err != nil {
		t.Fatalf("GetWaitpoint(%q): %v", created.ID, err)
	}
	if d := diff(created, got); d != "" {
		t.Errorf("GetWaitpoint(%q) differs from the created waitpoint (-created +got):\n%s", created.ID, d)
	}
	if got.CallbackHash != "ab12" || got.RunID != "run_1" || string(got.Schema) != `{"type":"object"}` {
		t.Errorf("GetWaitpoint(%q) = %+v, want the callback hash, run and schema kept", created.ID, got)
	}
	_, err = s.GetWaitpoint(ctx, "wp_nope")
	wantErr(t, "GetWaitpoint(wp_nope)", err, errdefs.ErrNotFound)
	_, err = s.MarkWaited(ctx, "wp_nope", base)
	wantErr(t, "MarkWaited(wp_nope)", err, errdefs.ErrNotFound)
	_, _, err = s.ResolveWaitpoint(ctx, "wp_nope", waitpoints.Resolution{Status: waitpoints.StatusCanceled})
	wantErr(t, "ResolveWaitpoint(wp_nope)", err, errdefs.ErrNotFound)
}

func testWaitpointIdempotency(t *testing.T, s Store) {
	ctx := t.Context()
	w := newWaitpoint("p", "dev", waitpoints.KindToken)
	w.IdempotencyKey = "k1"
	first := mustCreateWaitpoint(t, s, w)
	again, created, err := s.CreateWaitpoint(ctx, w)
	if err != nil || created || again.ID != first.ID {
		t.Errorf("CreateWaitpoint(same key) = %s, %v, %v; want %s, false", again.ID, created, err, first.ID)
	}
	// The key is scoped to the project env.
	other := w
	other.Env = "prod"
	mustCreateWaitpoint(t, s, other)
	noKey := newWaitpoint("p", "dev", waitpoints.KindToken)
	a, b := mustCreateWaitpoint(t, s, noKey), mustCreateWaitpoint(t, s, noKey)
	if a.ID == b.ID {
		t.Errorf("two waitpoints without a key got the same id %s", a.ID)
	}
}

func testWaitpointList(t *testing.T, s Store) {
	ctx := t.Context()
	specs := []struct {
		env, run string
		tags     []string
	}{
		{"dev", "run_a", []string{"x"}}, {"dev", "run_a", []string{"x", "y"}}, {"dev", "", []string{"y"}},
		{"dev", "run_b", nil}, {"prod", "run_a", []string{"x"}},
	}
	var ws []waitpoints.Waitpoint
	for i, sp := range specs {
		kind := waitpoints.KindToken
		if i == 3 {
			kind = waitpoints.KindHuman
		}
		w := newWaitpoint("p", sp.env, kind)
		w.RunID, w.Tags, w.CreatedAt = sp.run, sp.tags, at(i)
		ws = append(ws, mustCreateWaitpoint(t, s, w))
	}
	if _, _, err := s.ResolveWaitpoint(ctx, ws[1].ID, waitpoints.Resolution{Status: waitpoints.StatusCanceled, Time: at(10)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkWaited(ctx, ws[0].ID, at(11)); err != nil {
		t.Fatal(err)
	}
	id := func(i int) string { return ws[i].ID }
	tests := []struct {
		name string
		f    waitpoints.Filter
		want []string
	}{
		{"env", waitpoints.Filter{Project: "p", Env: "dev"}, []string{id(3), id(2), id(1), id(0)}},
		{"status", waitpoints.Filter{Project: "p", Env: "dev", Status: waitpoints.StatusWaiting}, []string{id(3), id(2), id(0)}},
		{"run", waitpoints.Filter{Project: "p", Env: "dev", RunID: "run_a"}, []string{id(1), id(0)}},
		{"tag", waitpoints.Filter{Project: "p", Env: "dev", Tag: "x"}, []string{id(1), id(0)}},
		{"kind human", waitpoints.Filter{Project: "p", Env: "dev", Kind: waitpoints.KindHuman}, []string{id(3)}},
		{"kind token waiting", waitpoints.Filter{Project: "p", Env: "dev", Kind: waitpoints.KindToken, Status: waitpoints.StatusWaiting}, []string{id(2), id(0)}},
		{"tag y waiting", waitpoints.Filter{Project: "p", Env: "dev", Tag: "y", Status: waitpoints.StatusWaiting}, []string{id(2)}},
		{"waited", waitpoints.Filter{Project: "p", Env: "dev", Waited: true}, []string{id(0)}},
		{"no match", waitpoints.Filter{Project: "p", Env: "dev", Tag: "z"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, err := s.ListWaitpoints(ctx, tt.f)
			if err != nil {
				t.Fatalf("ListWaitpoints(%+v): %v", tt.f, err)
			}
			if d := diff(tt.want, wpIDs(page.Waitpoints)); d != "" || page.NextCursor != "" {
				t.Errorf("ListWaitpoints(%+v) = %v (cursor %q), want %v", tt.f, wpIDs(page.Waitpoints), page.NextCursor, tt.want)
			}
		})
	}
}

func wpIDs(ws []waitpoints.Waitpoint) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}

func testWaitpointPagination(t *testing.T, s Store) {
	ctx := t.Context()
	for i := range 7 {
		w := newWaitpoint("p", "dev", waitpoints.KindToken)
		w.CreatedAt = at(i % 3) // ties on created_at are ordered by id
		mustCreateWaitpoint(t, s, w)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("ListWaitpoints pagination does not end")
		}
		page, err := s.ListWaitpoints(ctx, waitpoints.Filter{Project: "p", Env: "dev", Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatalf("ListWaitpoints(cursor %q): %v", cursor, err)
		}
		if len(page.Waitpoints) > 3 {
			t.Fatalf("page of %d waitpoints, want at most 3", len(page.Waitpoints))
		}
		got = append(got, wpIDs(page.Waitpoints)...)
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	all, err := s.ListWaitpoints(ctx, waitpoints.Filter{Project: "p", Env: "dev", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(wpIDs(all.Waitpoints), got); d != "" || len(got) != 7 {
		t.Errorf("paged ids differ from one page of all 7 (-all +paged):\n%s", d)
	}
	_, err = s.ListWaitpoints(ctx, waitpoints.Filter{Project: "p", Env: "dev", Cursor: "!!"})
	if err == nil {
		t.Errorf("ListWaitpoints(malformed cursor) = nil error, want one")
	}
}

func testWaitpointResolve(t *testing.T, s Store) {
	ctx := t.Context()
	w := mustCreateWaitpoint(t, s, newWaitpoint("p", "dev", waitpoints.KindToken))
	done := waitpoints.Resolution{Status: waitpoints.StatusCompleted, Data: json.RawMessage(`{"ok":true}`), Time: at(5)}
	got, changed, err := s.ResolveWaitpoint(ctx, w.ID, done)
	if err != nil || !changed || got.Status != waitpoints.StatusCompleted || string(got.Data) != `{"ok":true}` ||
		got.CompletedAt == nil || !got.CompletedAt.Equal(at(5)) {
		t.Fatalf("ResolveWaitpoint(complete) = %+v, %v, %v", got, changed, err)
	}
	again, changed, err := s.ResolveWaitpoint(ctx, w.ID, waitpoints.Resolution{Status: waitpoints.StatusCompleted, Data: json.RawMessage(`{"ok":true}`), Time: at(9)})
	if err != nil || changed || !again.CompletedAt.Equal(at(5)) {
		t.Errorf("ResolveWaitpoint(same data again) = %+v, %v, %v; want unchanged, no error", again, changed, err)
	}
	_, _, err = s.ResolveWaitpoint(ctx, w.ID, waitpoints.Resolution{Status: waitpoints.StatusCompleted, Data: json.RawMessage(`{"ok":false}`)})
	wantErr(t, "ResolveWaitpoint(other data)", err, errdefs.ErrConflict)
	_, _, err = s.ResolveWaitpoint(ctx, w.ID, waitpoints.Resolution{Status: waitpoints.StatusCanceled})
	wantErr(t, "ResolveWaitpoint(cancel a completed one)", err, errdefs.ErrConflict)
	stored, _ := s.GetWaitpoint(ctx, w.ID)
	if stored.Status != waitpoints.StatusCompleted || string(stored.Data) != `{"ok":true}` {
		t.Errorf("after conflicts the waitpoint is %s %s, want COMPLETED with the first data", stored.Status, stored.Data)
	}

	c := mustCreateWaitpoint(t, s, newWaitpoint("p", "dev", waitpoints.KindToken))
	got, changed, err = s.ResolveWaitpoint(ctx, c.ID, waitpoints.Resolution{Status: waitpoints.StatusCanceled, Reason: "no", Time: at(6)})
	if err != nil || !changed || got.Status != waitpoints.StatusCanceled || got.Reason != "no" {
		t.Errorf("ResolveWaitpoint(cancel) = %+v, %v, %v", got, changed, err)
	}
	_, _, err = s.ResolveWaitpoint(ctx, c.ID, done)
	wantErr(t, "ResolveWaitpoint(complete a canceled one)", err, errdefs.ErrConflict)
}

func testWaitpointDue(t *testing.T, s Store) {
	ctx := t.Context()
	mk := func(kind waitpoints.Kind, sec int) waitpoints.Waitpoint {
		w := newWaitpoint("p", "dev", kind)
		if sec >= 0 {
			tt := at(sec)
			w.TimeoutAt = &tt
		}
		return mustCreateWaitpoint(t, s, w)
	}
	timer, token, later, never := mk(waitpoints.KindTimer, 10), mk(waitpoints.KindToken, 5), mk(waitpoints.KindToken, 60), mk(waitpoints.KindToken, -1)
	resolved := mk(waitpoints.KindToken, 1)
	if _, _, err := s.ResolveWaitpoint(ctx, resolved.ID, waitpoints.Resolution{Status: waitpoints.StatusCanceled}); err != nil {
		t.Fatal(err)
	}
	due, err := s.DueWaitpoints(ctx, at(10), 10)
	if err != nil {
		t.Fatalf("DueWaitpoints: %v", err)
	}
	if d := diff([]string{token.ID, timer.ID}, wpIDs(due)); d != "" {
		t.Errorf("DueWaitpoints(at 10s) = %v, want the token due at 5s then the timer at 10s (not %s, %s, %s)",
			wpIDs(due), later.ID, never.ID, resolved.ID)
	}
	if due, _ := s.DueWaitpoints(ctx, at(10), 1); len(due) != 1 {
		t.Errorf("DueWaitpoints(limit 1) returned %d", len(due))
	}
	if _, _, err := s.ResolveWaitpoint(ctx, token.ID, waitpoints.Resolution{Status: waitpoints.StatusTimedOut, Time: at(10)}); err != nil {
		t.Fatal(err)
	}
	if due, _ := s.DueWaitpoints(ctx, at(10), 10); len(due) != 1 || due[0].ID != timer.ID {
		t.Errorf("after timing out the first, DueWaitpoints = %v, want only the timer", wpIDs(due))
	}
	m, err := s.MarkWaited(ctx, later.ID, at(20))
	if err != nil || m.WaitedAt == nil || !m.WaitedAt.Equal(at(20)) {
		t.Fatalf("MarkWaited = %+v, %v", m, err)
	}
	m, _ = s.MarkWaited(ctx, later.ID, at(30))
	if !m.WaitedAt.Equal(at(20)) {
		t.Errorf("a second MarkWaited moved waitedAt to %v, want the first (%v)", m.WaitedAt, at(20))
	}
}
