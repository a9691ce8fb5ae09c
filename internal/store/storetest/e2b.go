package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/helmr/helmr/internal/e2b"
	"github.com/helmr/helmr/internal/errdefs"
)

var e2bTests = []storeTest{
	{"E2BSandboxCreateGetList", testE2BSandboxCreateGetList},
	{"E2BSandboxEndDelete", testE2BSandboxEndDelete},
}

func testE2BSandboxCreateGetList(t *testing.T, s Store) {
	ctx := t.Context()
	var made []e2b.Sandbox
	for i, id := range []string{"ws_e2b1", "ws_e2b2", "ws_e2b3"} {
		sb := e2b.Sandbox{ID: id, Project: "p", Env: "dev", TemplateID: "base",
			Metadata: map[string]string{"n": id}, EnvVars: map[string]string{"K": "v"}, AutoPause: i == 1,
			StartedAt: base.Add(time.Duration(i) * time.Second), EndAt: base.Add(time.Hour)}
		if err := s.CreateE2BSandbox(ctx, sb); err != nil {
			t.Fatalf("CreateE2BSandbox(%s): %v", id, err)
		}
		made = append(made, sb)
	}
	if err := s.CreateE2BSandbox(ctx, e2b.Sandbox{ID: "ws_e2bother", Project: "p", Env: "prod", TemplateID: "base",
		StartedAt: base, EndAt: base}); err != nil {
		t.Fatalf("CreateE2BSandbox(other env): %v", err)
	}
	got, err := s.GetE2BSandbox(ctx, "ws_e2b2")
	if err != nil || !cmp.Equal(got, made[1]) {
		t.Fatalf("GetE2BSandbox = %+v, %v; want %+v (%s)", got, err, made[1], cmp.Diff(made[1], got))
	}
	if _, err := s.GetE2BSandbox(ctx, "ws_none"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetE2BSandbox(unknown) = %v, want not found", err)
	}
	page, err := s.ListE2BSandboxes(ctx, "p", "dev", "", 2)
	if err != nil || len(page) != 2 || page[0].ID != "ws_e2b3" || page[1].ID != "ws_e2b2" {
		t.Fatalf("ListE2BSandboxes(first page) = %+v, %v; want ws_e2b3, ws_e2b2", page, err)
	}
	page, err = s.ListE2BSandboxes(ctx, "p", "dev", page[1].ID, 2)
	if err != nil || len(page) != 1 || page[0].ID != "ws_e2b1" {
		t.Fatalf("ListE2BSandboxes(second page) = %+v, %v; want ws_e2b1", page, err)
	}
	if page[0].Metadata == nil || page[0].EnvVars["K"] != "v" {
		t.Errorf("listed sandbox = %+v, want its metadata and envVars", page[0])
	}
}

func testE2BSandboxEndDelete(t *testing.T, s Store) {
	ctx := t.Context()
	for i, id := range []string{"ws_end1", "ws_end2"} {
		if err := s.CreateE2BSandbox(ctx, e2b.Sandbox{ID: id, Project: "p", Env: "dev", TemplateID: "base",
			StartedAt: base, EndAt: base.Add(time.Duration(i+1) * time.Minute)}); err != nil {
			t.Fatalf("CreateE2BSandbox(%s): %v", id, err)
		}
	}
	ended, err := s.EndedE2BSandboxes(ctx, base.Add(time.Minute), 10)
	if err != nil || len(ended) != 1 || ended[0].ID != "ws_end1" {
		t.Fatalf("EndedE2BSandboxes(+1m) = %+v, %v; want ws_end1", ended, err)
	}
	if err := s.SetE2BSandboxEnd(ctx, "ws_end1", base.Add(time.Hour)); err != nil {
		t.Fatalf("SetE2BSandboxEnd: %v", err)
	}
	if err := s.SetE2BSandboxEnd(ctx, "ws_none", base); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetE2BSandboxEnd(unknown) = %v, want not found", err)
	}
	ended, err = s.EndedE2BSandboxes(ctx, base.Add(2*time.Minute), 10)
	if err != nil || len(ended) != 1 || ended[0].ID != "ws_end2" {
		t.Fatalf("EndedE2BSandboxes(+2m) after moving ws_end1 = %+v, %v; want ws_end2", ended, err)
	}
	if err := s.DeleteE2BSandbox(ctx, "ws_end2"); err != nil {
		t.Fatalf("DeleteE2BSandbox: %v", err)
	}
	if _, err := s.GetE2BSandbox(ctx, "ws_end2"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetE2BSandbox(deleted) = %v, want not found", err)
	}
}
