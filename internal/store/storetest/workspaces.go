package storetest

import (
	"slices"
	"testing"

	"github.com/helmr/helmr/internal/workspaces"
)

var workspaceTests = []storeTest{
	{"Workspaces", testWorkspaces},
}

// testWorkspaces creates, reads, lists, uses and deletes workspaces, and
// checks bad input stores nothing.
func testWorkspaces(t *testing.T, s Store) {
	ctx := t.Context()
	var made []workspaces.Workspace
	for i, scope := range [][2]string{{"p", "dev"}, {"p", "dev"}, {"p", "prod"}} {
		w, err := s.CreateWorkspace(ctx, workspaces.Workspace{Project: scope[0], Env: scope[1], TaskID: "agent", CreatedAt: at(i), Host: "ignored"})
		if err != nil || len(w.ID) != len("ws_")+26 || w.Host != "" || !w.CreatedAt.Equal(at(i)) {
			t.Fatalf("CreateWorkspace = %+v, %v; want ws_… without a worker", w, err)
		}
		got, err := s.GetWorkspace(ctx, w.ID)
		if d := diff(w, got); err != nil || d != "" {
			t.Errorf("GetWorkspace(%s) = %v, mismatch (-created +stored):\n%s", w.ID, err, d)
		}
		made = append(made, w)
	}
	for _, bad := range []workspaces.Workspace{{Env: "dev", TaskID: "a"}, {Project: "p", TaskID: "a"}, {Project: "p", Env: "dev"}} {
		_, err := s.CreateWorkspace(ctx, bad)
		wantErr(t, "CreateWorkspace(incomplete)", err, workspaces.ErrInvalid)
	}
	_, err := s.GetWorkspace(ctx, "ws_missing")
	wantErr(t, "GetWorkspace(missing)", err, workspaces.ErrNotFound)

	list, err := s.ListWorkspaces(ctx, "p", "dev", 0)
	if err != nil || len(list) != 2 || list[0].ID != made[1].ID || list[1].ID != made[0].ID {
		t.Errorf("ListWorkspaces(p, dev) = %+v, %v; want the two dev workspaces, newest first", list, err)
	}
	if err := s.UseWorkspace(ctx, made[0].ID, "run_1", "w1", at(5)); err != nil {
		t.Fatal(err)
	}
	got, _ := s.GetWorkspace(ctx, made[0].ID)
	if got.Host != "w1" || got.LastRunID != "run_1" || got.UsedAt == nil || !got.UsedAt.Equal(at(5)) {
		t.Errorf("after UseWorkspace: %+v, want w1, run_1, used at %v", got, at(5))
	}
	wantErr(t, "UseWorkspace(missing)", s.UseWorkspace(ctx, "ws_missing", "r", "w", at(5)), workspaces.ErrNotFound)

	if err := s.DeleteWorkspace(ctx, made[0].ID, at(6)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteWorkspace(ctx, made[0].ID, at(7)); err != nil {
		t.Errorf("DeleteWorkspace twice: %v", err)
	}
	got, _ = s.GetWorkspace(ctx, made[0].ID)
	if got.DeletedAt == nil || !got.DeletedAt.Equal(at(6)) {
		t.Errorf("deleted workspace: DeletedAt %v, want the first deletion's %v", got.DeletedAt, at(6))
	}
	if list, _ := s.ListWorkspaces(ctx, "p", "dev", 0); len(list) != 1 || list[0].ID != made[1].ID {
		t.Errorf("ListWorkspaces after a delete = %+v, want only %s", list, made[1].ID)
	}
	gone, err := s.DeletedWorkspaces(ctx, []string{made[0].ID, made[1].ID, "ws_unknown"})
	if err != nil || !slices.Equal(gone, []string{made[0].ID, "ws_unknown"}) {
		t.Errorf("DeletedWorkspaces = %v, %v; want the deleted and the unknown", gone, err)
	}
	wantErr(t, "DeleteWorkspace(missing)", s.DeleteWorkspace(ctx, "ws_missing", at(8)), workspaces.ErrNotFound)
}
