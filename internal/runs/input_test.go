package runs_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
)

// TestTriggerChecksInput: a payload that does not fit the task's declared
// input is refused (ErrInvalid, each bad field's path in the message) and
// stores no run, whether it is a first trigger or a replay; one that fits
// is queued as given.
func TestTriggerChecksInput(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "helmr.db"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := runs.NewService(st, st, st, runs.NewBroker(), slog.New(slog.DiscardHandler))
	typed := goodTask("typed")
	typed.Input = json.RawMessage(`{"type": "object", "properties": {"repo": {"type": "string"}, "pr": {"type": "integer"}}, "required": ["repo"]}`)
	if _, err := st.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{typed, goodTask("free")}},
		Files:    map[string][]byte{"bundles/tasks/a.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		page, err := svc.List(ctx, runs.Filter{Project: "p", Env: "dev", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return len(page.Runs)
	}
	for _, tc := range []struct {
		payload string
		want    []string
	}{
		{`{"pr": 7}`, []string{"payload.repo: missing property", `task "typed"`}},
		{`{"repo": 1, "pr": "x"}`, []string{"payload.pr: got string, want integer; payload.repo: got number, want string"}},
		{``, []string{"payload: got null, want object"}},
	} {
		_, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "typed", Payload: json.RawMessage(tc.payload)})
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("Trigger(%q) = %v, want ErrInvalid", tc.payload, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Trigger(%q) = %q, want it to contain %q", tc.payload, err, w)
			}
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("%d runs stored after refused payloads, want 0", n)
	}
	r, created, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "typed", Payload: json.RawMessage(`{"repo": "helmr/helmr", "pr": 7}`)})
	if err != nil || !created || r.Status != runs.StatusQueued || string(r.Payload) != `{"repo": "helmr/helmr", "pr": 7}` {
		t.Fatalf("Trigger(a fitting payload) = %+v, %v, %v; want a QUEUED run with the payload", r, created, err)
	}
	// A replay with an edited payload is checked too.
	_, _, err = svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "typed", ReplayOf: r.ID, Payload: json.RawMessage(`{"pr": 8}`)})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "payload.repo: missing property") {
		t.Errorf("replay with a bad payload = %v, want ErrInvalid naming payload.repo", err)
	}
	// A task without an input takes anything.
	if _, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "p", Env: "dev", TaskID: "free", Payload: json.RawMessage(`[1, "x"]`)}); err != nil {
		t.Errorf("Trigger(free, any payload) = %v", err)
	}
	if n := count(); n != 2 {
		t.Errorf("%d runs stored, want 2", n)
	}
}

// BenchmarkCheckInput measures compiling and checking a typical input at
// trigger (the schema is compiled at each trigger, not cached).
func BenchmarkCheckInput(b *testing.B) {
	schema := json.RawMessage(`{"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {"repo": {"type": "string", "minLength": 1}, "pr": {"type": "integer", "minimum": 1}, "labels": {"type": "array", "items": {"type": "string"}}, "mode": {"enum": ["fast", "thorough"]}}, "required": ["repo", "pr"], "additionalProperties": false}`)
	payload := json.RawMessage(`{"repo": "helmr/helmr", "pr": 7, "labels": ["a", "b"], "mode": "fast"}`)
	for b.Loop() {
		in, err := deployments.CompileInput(schema)
		if err != nil {
			b.Fatal(err)
		}
		if ps, err := in.Check(payload); err != nil || len(ps) != 0 {
			b.Fatal(ps, err)
		}
	}
}
