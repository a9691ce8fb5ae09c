package storetest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/helmr/helmr/internal/runs"
)

func init() {
	runTests = append(runTests, storeTest{"ChildRuns", testChildRuns})
}

// testChildRuns: children are listed by parent; a waitpoint's runs come
// back in the order linked, a repeated link changes nothing, and a run
// names the waitpoints that wait for it.
func testChildRuns(t *testing.T, s Store) {
	ctx := t.Context()
	parent := mustCreate(t, s, newRun("p", "dev", "parent"))
	var kids []string
	for i := range 3 {
		r := newRun("p", "dev", "child")
		r.CreatedAt = at(i + 1)
		r.ParentID, r.RootID = parent.ID, parent.ID
		kids = append(kids, mustCreate(t, s, r).ID)
	}
	page, err := s.ListRuns(ctx, runs.Filter{ParentID: parent.ID})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, r := range page.Runs {
		listed = append(listed, r.ID)
	}
	if d := cmp.Diff([]string{kids[2], kids[1], kids[0]}, listed); d != "" {
		t.Errorf("ListRuns(parent) (-want +got):\n%s", d)
	}
	order := []string{kids[2], kids[0], kids[1]}
	for range 2 {
		if err := s.LinkChildWait(ctx, "wp_1", order); err != nil {
			t.Fatalf("LinkChildWait: %v", err)
		}
	}
	if err := s.LinkChildWait(ctx, "wp_2", kids[:1]); err != nil {
		t.Fatal(err)
	}
	got, err := s.ChildWaitRuns(ctx, "wp_1")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got {
		ids = append(ids, r.ID)
		if r.ParentID != parent.ID || r.RootID != parent.ID {
			t.Errorf("run %s parent %q root %q, want %s", r.ID, r.ParentID, r.RootID, parent.ID)
		}
	}
	if d := cmp.Diff(order, ids); d != "" {
		t.Errorf("ChildWaitRuns(wp_1) (-want +got):\n%s", d)
	}
	wps, err := s.ChildWaitsOf(ctx, kids[0])
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"wp_1", "wp_2"}, wps); d != "" {
		t.Errorf("ChildWaitsOf (-want +got):\n%s", d)
	}
	if none, err := s.ChildWaitRuns(ctx, "wp_none"); err != nil || len(none) != 0 {
		t.Errorf("ChildWaitRuns(unknown) = %v, %v; want none", none, err)
	}
}
