package storetest

import (
	"cmp"
	"slices"
	"testing"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

func init() {
	runTests = append(runTests,
		storeTest{"ListRunsFilters", testListFilters},
		storeTest{"ListRunsPagination", testListPagination},
		storeTest{"ListRunsLimits", testListLimits},
	)
}

func testListFilters(t *testing.T, s Store) {
	ctx := t.Context()
	specs := []struct{ project, env, task string }{
		{"p", "dev", "a"}, {"p", "dev", "a"}, {"p", "dev", "b"}, {"p", "prod", "a"}, {"q", "dev", "a"},
	}
	var rs []runs.Run
	for i, sp := range specs {
		r := newRun(sp.project, sp.env, sp.task)
		r.CreatedAt = at(i)
		rs = append(rs, mustCreate(t, s, r))
	}
	if _, _, err := s.Transition(ctx, rs[1].ID, runs.Transition{From: []runs.Status{runs.StatusQueued}, To: runs.StatusStarting}); err != nil {
		t.Fatalf("Transition(%q): %v", rs[1].ID, err)
	}
	id := func(i int) string { return rs[i].ID }
	tests := []struct {
		name string
		f    runs.Filter
		want []string
	}{
		{"all", runs.Filter{}, []string{id(4), id(3), id(2), id(1), id(0)}},
		{"project", runs.Filter{Project: "p"}, []string{id(3), id(2), id(1), id(0)}},
		{"project env", runs.Filter{Project: "p", Env: "dev"}, []string{id(2), id(1), id(0)}},
		{"task", runs.Filter{Project: "p", Env: "dev", TaskID: "a"}, []string{id(1), id(0)}},
		{"status", runs.Filter{Status: runs.StatusStarting}, []string{id(1)}},
		{"status queued", runs.Filter{Project: "p", Env: "dev", TaskID: "a", Status: runs.StatusQueued}, []string{id(0)}},
		{"no match", runs.Filter{Project: "nope"}, []string{}},
		{"since", runs.Filter{Since: at(3)}, []string{id(4), id(3)}},
		{"until", runs.Filter{Until: at(1)}, []string{id(0)}},
		{"window", runs.Filter{Since: at(1), Until: at(3)}, []string{id(2), id(1)}},
		{"id prefix", runs.Filter{IDPrefix: id(2)[:len(id(2))-1]}, prefixed(rs, id(2)[:len(id(2))-1])},
		{"id whole", runs.Filter{IDPrefix: id(2)}, []string{id(2)}},
		{"id no match", runs.Filter{IDPrefix: "zz"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, err := s.ListRuns(ctx, tt.f)
			if err != nil {
				t.Fatalf("ListRuns(%+v): %v", tt.f, err)
			}
			if d := diff(tt.want, ids(page.Runs)); d != "" || page.NextCursor != "" {
				t.Errorf("ListRuns(%+v) = %v (cursor %q), want %v:\n%s", tt.f, ids(page.Runs), page.NextCursor, tt.want, d)
			}
		})
	}
}

// prefixed is the ids of rs (newest first) that start with p.
func prefixed(rs []runs.Run, p string) []string {
	out := []string{}
	for i := len(rs) - 1; i >= 0; i-- {
		if len(rs[i].ID) >= len(p) && rs[i].ID[:len(p)] == p {
			out = append(out, rs[i].ID)
		}
	}
	return out
}

// sortNewestFirst orders rs as ListRuns does: (CreatedAt, ID) descending.
func sortNewestFirst(rs []runs.Run) {
	slices.SortFunc(rs, func(a, b runs.Run) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
}

func testListPagination(t *testing.T, s Store) {
	ctx := t.Context()
	var all []runs.Run
	for i := range 7 {
		r := newRun("p", "dev", "a")
		r.CreatedAt = at(i / 2) // pairs share a time: the ID breaks the tie
		all = append(all, mustCreate(t, s, r))
	}
	sortNewestFirst(all)
	f := runs.Filter{Project: "p", Limit: 3}
	var got []runs.Run
	for page := 0; ; page++ {
		p, err := s.ListRuns(ctx, f)
		if err != nil {
			t.Fatalf("ListRuns(%+v): %v", f, err)
		}
		got = append(got, p.Runs...)
		if page == 0 {
			// Newer runs arriving between pages must not shift later pages.
			for range 2 {
				r := newRun("p", "dev", "a")
				r.CreatedAt = at(100)
				mustCreate(t, s, r)
			}
		}
		if p.NextCursor == "" {
			break
		}
		if page > 5 {
			t.Fatalf("ListRuns(%+v) keeps returning cursors", f)
		}
		f.Cursor = p.NextCursor
	}
	if d := diff(ids(all), ids(got)); d != "" {
		t.Errorf("ListRuns pages = %v, want %v:\n%s", ids(got), ids(all), d)
	}
	_, err := s.ListRuns(ctx, runs.Filter{Cursor: "not a cursor"})
	wantErr(t, `ListRuns(Cursor "not a cursor")`, err, errdefs.ErrInvalid)
}

func testListLimits(t *testing.T, s Store) {
	for i := range 1001 {
		r := newRun("p", "dev", "a")
		r.CreatedAt = at(i)
		mustCreate(t, s, r)
	}
	tests := []struct{ limit, want int }{{0, 50}, {-1, 50}, {7, 7}, {1000, 1000}, {5000, 1000}}
	for _, tt := range tests {
		p, err := s.ListRuns(t.Context(), runs.Filter{Limit: tt.limit})
		if err != nil || len(p.Runs) != tt.want || p.NextCursor == "" {
			t.Errorf("ListRuns(Limit %d) = %d runs (cursor %q), %v; want %d and a cursor", tt.limit, len(p.Runs), p.NextCursor, err, tt.want)
		}
	}
}
