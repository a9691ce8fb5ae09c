package storetest

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
)

var deploymentTests = []storeTest{
	{"DeploymentVersions", testDeploymentVersions},
	{"DeploymentVersionsConcurrent", testDeploymentConcurrent},
	{"DeploymentAtomic", testDeploymentAtomic},
	{"DeploymentFiles", testDeploymentFiles},
	{"GetTaskAndCurrentTasks", testTasks},
	{"DeploymentBuilds", testDeploymentBuilds},
}

func task(id, module string) deployments.TaskManifest {
	return deployments.TaskManifest{
		ID: id, Module: module, Export: id, MaxDuration: 60, HasRun: true,
		Sandbox: &deployments.SandboxManifest{Name: "box", Resources: deployments.Resources{CPU: 1, Memory: "512Mi"}},
	}
}

func newDeployment(project, env string, tasks ...deployments.TaskManifest) deployments.Deployment {
	return deployments.Deployment{
		Project: project, Env: env,
		Manifest: deployments.Manifest{Project: project, Tasks: tasks},
		Files:    map[string][]byte{"bundle/index.mjs": []byte("export const a = 1;\n"), "empty.txt": {}},
	}
}

func mustDeploy(t *testing.T, s Store, d deployments.Deployment) deployments.Deployment {
	t.Helper()
	got, err := s.CreateDeployment(t.Context(), d)
	if err != nil {
		t.Fatalf("CreateDeployment(%s/%s): %v", d.Project, d.Env, err)
	}
	return got
}

var ignoreFiles = cmpopts.IgnoreFields(deployments.Deployment{}, "Files")

func testDeploymentVersions(t *testing.T, s Store) {
	ctx := t.Context()
	tests := []struct{ project, env string }{
		{"p", "dev"}, {"p", "dev"}, {"p", "prod"}, {"p", "dev"}, {"q", "dev"},
	}
	wantVersions := []int{1, 2, 1, 3, 1}
	var made []deployments.Deployment
	for i, tt := range tests {
		in := newDeployment(tt.project, tt.env, task("a", "bundle/index.mjs"))
		in.CreatedAt = at(i)
		got := mustDeploy(t, s, in)
		if got.Version != wantVersions[i] || !strings.HasPrefix(got.ID, "dep_") || !got.CreatedAt.Equal(at(i)) {
			t.Errorf("CreateDeployment(%s/%s) = %s v%d at %v, want dep_… v%d at %v", tt.project, tt.env, got.ID, got.Version, got.CreatedAt, wantVersions[i], at(i))
		}
		stored, err := s.GetDeployment(ctx, got.ID)
		if err != nil {
			t.Fatalf("GetDeployment(%q): %v", got.ID, err)
		}
		if d := diff(got, stored, ignoreFiles); d != "" || stored.Files != nil {
			t.Errorf("GetDeployment(%q) mismatch (-created +stored), files %v:\n%s", got.ID, stored.Files, d)
		}
		made = append(made, got)
	}
	list, err := s.ListDeployments(ctx, "p", "dev", 2)
	if err != nil {
		t.Fatalf("ListDeployments(p, dev, 2): %v", err)
	}
	if d := diff([]deployments.Deployment{made[3], made[1]}, list, ignoreFiles); d != "" {
		t.Errorf("ListDeployments(p, dev, 2) mismatch (-want +got):\n%s", d)
	}
	if list, err := s.ListDeployments(ctx, "p", "dev", 0); err != nil || len(list) != 3 {
		t.Errorf("ListDeployments(p, dev, 0) = %d, %v; want 3", len(list), err)
	}
	if list, err := s.ListDeployments(ctx, "none", "dev", 0); err != nil || len(list) != 0 {
		t.Errorf("ListDeployments(none, dev, 0) = %v, %v; want none", list, err)
	}
	_, err = s.GetDeployment(ctx, "dep_missing")
	wantErr(t, `GetDeployment("dep_missing")`, err, errdefs.ErrNotFound)
	_, err = s.CreateDeployment(ctx, deployments.Deployment{Env: "dev"})
	wantErr(t, "CreateDeployment(no project)", err, errdefs.ErrInvalid)
}

func testDeploymentConcurrent(t *testing.T, s Store) {
	const n = 8
	versions := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			d, err := s.CreateDeployment(t.Context(), newDeployment("p", "dev", task("a", "m")))
			if err != nil {
				t.Errorf("CreateDeployment(p/dev) concurrently: %v", err)
			}
			versions[i] = d.Version
		})
	}
	wg.Wait()
	slices.Sort(versions)
	if d := diff([]int{1, 2, 3, 4, 5, 6, 7, 8}, versions); d != "" {
		t.Errorf("concurrent CreateDeployment versions = %v, want 1..%d", versions, n)
	}
}

func testDeploymentAtomic(t *testing.T, s Store) {
	ctx := t.Context()
	// The second task repeats the first's id: inserting it fails after the
	// deployment row, the files and the first task went in.
	bad := newDeployment("p", "dev", task("a", "m"), task("a", "m"))
	if _, err := s.CreateDeployment(ctx, bad); err == nil {
		t.Fatalf("CreateDeployment(duplicate task ids) = nil error, want one")
	}
	if counts := countRows(t, s); counts != nil {
		for table, n := range counts {
			if n != 0 {
				t.Errorf("after a failed CreateDeployment, table %s has %d rows, want 0", table, n)
			}
		}
	}
	if list, err := s.ListDeployments(ctx, "p", "dev", 0); err != nil || len(list) != 0 {
		t.Errorf("ListDeployments(p, dev) after failure = %v, %v; want none", list, err)
	}
	_, err := s.GetTask(ctx, "p", "dev", "a")
	wantErr(t, "GetTask(p, dev, a) after failure", err, errdefs.ErrNotFound)
	if got := mustDeploy(t, s, newDeployment("p", "dev", task("a", "m"))); got.Version != 1 {
		t.Errorf("CreateDeployment after a failed one = v%d, want v1", got.Version)
	}
}

func testDeploymentFiles(t *testing.T, s Store) {
	ctx := t.Context()
	in := newDeployment("p", "dev", task("a", "m"))
	in.Files["bin/blob"] = []byte{0, 1, 2, 255}
	d := mustDeploy(t, s, in)
	files, err := s.GetDeploymentFiles(ctx, d.ID)
	if err != nil {
		t.Fatalf("GetDeploymentFiles(%q): %v", d.ID, err)
	}
	if diff := diff(in.Files, files); diff != "" {
		t.Errorf("GetDeploymentFiles(%q) mismatch (-want +got):\n%s", d.ID, diff)
	}
	none := newDeployment("p", "dev")
	none.Files = nil
	d = mustDeploy(t, s, none)
	if files, err := s.GetDeploymentFiles(ctx, d.ID); err != nil || len(files) != 0 {
		t.Errorf("GetDeploymentFiles(%q) = %v, %v; want no files", d.ID, files, err)
	}
	_, err = s.GetDeploymentFiles(ctx, "dep_missing")
	wantErr(t, `GetDeploymentFiles("dep_missing")`, err, errdefs.ErrNotFound)
}

func testTasks(t *testing.T, s Store) {
	ctx := t.Context()
	mustDeploy(t, s, newDeployment("p", "dev", task("a", "v1.mjs"), task("b", "v1.mjs")))
	v2 := mustDeploy(t, s, newDeployment("p", "dev", task("c", "v2.mjs"), task("b", "v2.mjs")))
	mustDeploy(t, s, newDeployment("p", "prod", task("a", "prod.mjs")))
	want := func(spec deployments.TaskManifest) deployments.Task {
		return deployments.Task{ID: spec.ID, Project: "p", Env: "dev", DeploymentID: v2.ID, DeploymentVersion: 2, Spec: spec}
	}
	current, err := s.CurrentTasks(ctx, "p", "dev")
	if err != nil {
		t.Fatalf("CurrentTasks(p, dev): %v", err)
	}
	if d := diff([]deployments.Task{want(task("b", "v2.mjs")), want(task("c", "v2.mjs"))}, current); d != "" {
		t.Errorf("CurrentTasks(p, dev) mismatch (-want +got):\n%s", d)
	}
	tests := []struct {
		env, id string
		found   bool
	}{
		{"dev", "b", true}, // from v2, not v1
		{"dev", "c", true},
		{"dev", "a", false}, // dropped by the latest deployment
		{"dev", "zzz", false},
		{"staging", "a", false},
	}
	for _, tt := range tests {
		got, err := s.GetTask(ctx, "p", tt.env, tt.id)
		if !tt.found {
			wantErr(t, name("GetTask(p, ", tt.env, ", ", tt.id, ")"), err, errdefs.ErrNotFound)
			continue
		}
		if err != nil {
			t.Fatalf("GetTask(p, %s, %s): %v", tt.env, tt.id, err)
		}
		if d := diff(want(task(tt.id, "v2.mjs")), got); d != "" {
			t.Errorf("GetTask(p, %s, %s) mismatch (-want +got):\n%s", tt.env, tt.id, d)
		}
	}
	if tasks, err := s.CurrentTasks(ctx, "p", "staging"); err != nil || len(tasks) != 0 {
		t.Errorf("CurrentTasks(p, staging) = %v, %v; want none", tasks, err)
	}
}

// testDeploymentBuilds checks that a deployment with a build run follows
// it: BUILDING while it is under way, READY with the built images once it
// completes, FAILED with its message otherwise; and that only READY
// deployments provide the current tasks. Build runs stay out of task run
// listings.
func testDeploymentBuilds(t *testing.T, s Store) {
	ctx := t.Context()
	v1 := mustDeploy(t, s, newDeployment("b", "dev", task("a", "bundle/index.mjs")))
	if v1.Status != deployments.StatusReady {
		t.Errorf("CreateDeployment(no build).Status = %s, want READY", v1.Status)
	}
	build := func(v int) runs.Run {
		r := newRun("b", "dev", "")
		r.Kind, r.DeploymentVersion, r.Payload = runs.KindBuild, v, json.RawMessage(`{"noCache":true}`)
		return mustCreate(t, s, r)
	}
	deployWith := func(run runs.Run) deployments.Deployment {
		d := newDeployment("b", "dev", task("a", "bundle/index.mjs"), task("c", "bundle/index.mjs"))
		d.BuildRunID = run.ID
		return mustDeploy(t, s, d)
	}
	current := func(want deployments.Deployment, image *deployments.ImageBuild) {
		t.Helper()
		got, err := s.GetTask(ctx, "b", "dev", "a")
		if err != nil || got.DeploymentID != want.ID {
			t.Fatalf("GetTask(a) = %s, %v; want the task of %s (v%d)", got.DeploymentID, err, want.ID, want.Version)
		}
		if d := diff(image, got.Image); d != "" {
			t.Errorf("GetTask(a).Image mismatch (-want +got):\n%s", d)
		}
		tasks, err := s.CurrentTasks(ctx, "b", "dev")
		if err != nil || len(tasks) == 0 || tasks[0].DeploymentID != want.ID {
			t.Errorf("CurrentTasks = %+v, %v; want the tasks of %s", tasks, err, want.ID)
		}
	}
	status := func(d deployments.Deployment, want deployments.Status, wantErr string) deployments.Deployment {
		t.Helper()
		got, err := s.GetDeployment(ctx, d.ID)
		if err != nil || got.Status != want || !strings.Contains(got.BuildError, wantErr) || (wantErr == "") != (got.BuildError == "") {
			t.Fatalf("GetDeployment(%s) = %s %q, %v; want %s %q", d.ID, got.Status, got.BuildError, err, want, wantErr)
		}
		return got
	}

	r2 := build(2)
	v2 := deployWith(r2)
	if v2.Status != deployments.StatusBuilding || v2.BuildRunID != r2.ID {
		t.Errorf("CreateDeployment(build %s) = %s, build %q; want BUILDING", r2.ID, v2.Status, v2.BuildRunID)
	}
	status(v2, deployments.StatusBuilding, "")
	current(v1, nil)

	img := deployments.ImageBuild{Name: "box", Digest: "sha256:1", Base: "helmr/b", BaseDigest: "sha256:2"}
	out, _ := json.Marshal(deployments.BuildOutput{Images: map[string]deployments.ImageBuild{"a": img}})
	for _, to := range []runs.Status{runs.StatusStarting, runs.StatusRunning, runs.StatusCompleted} {
		tr := runs.Transition{From: []runs.Status{runs.StatusQueued, runs.StatusStarting, runs.StatusRunning}, To: to, Time: at(1)}
		if to == runs.StatusCompleted {
			tr.Output = out
		}
		if _, _, err := s.Transition(ctx, r2.ID, tr); err != nil {
			t.Fatalf("Transition(build, %s): %v", to, err)
		}
	}
	got := status(v2, deployments.StatusReady, "")
	if d := diff(map[string]deployments.ImageBuild{"a": img}, got.Images); d != "" {
		t.Errorf("GetDeployment(built).Images mismatch (-want +got):\n%s", d)
	}
	current(v2, &img)
	if c, err := s.GetTask(ctx, "b", "dev", "c"); err != nil || c.Image != nil {
		t.Errorf("GetTask(c) = image %+v, %v; want no image (the build made none for it)", c.Image, err)
	}

	r3 := build(3)
	v3 := deployWith(r3)
	if _, _, err := s.Transition(ctx, r3.ID, runs.Transition{From: []runs.Status{runs.StatusQueued}, To: runs.StatusFailed, Time: at(2),
		Error: &runs.Error{Class: runs.ClassDeploymentBuild, Message: "step 2 (run false): exit status 1"}}); err != nil {
		t.Fatalf("Transition(build, FAILED): %v", err)
	}
	status(v3, deployments.StatusFailed, "step 2 (run false)")
	current(v2, &img)
	list, err := s.ListDeployments(ctx, "b", "dev", 0)
	if err != nil || len(list) != 3 || list[0].Status != deployments.StatusFailed || list[1].Status != deployments.StatusReady {
		t.Errorf("ListDeployments = %d, %v; want 3, newest FAILED then READY", len(list), err)
	}

	if page, err := s.ListRuns(ctx, runs.Filter{Project: "b"}); err != nil || len(page.Runs) != 0 {
		t.Errorf("ListRuns(project b) = %d runs, %v; want 0 (build runs are not task runs)", len(page.Runs), err)
	}
	page, err := s.ListRuns(ctx, runs.Filter{Project: "b", Kind: runs.KindBuild})
	if err != nil || len(page.Runs) != 2 || page.Runs[0].ID != r3.ID || page.Runs[0].Kind != runs.KindBuild {
		t.Errorf("ListRuns(project b, builds) = %+v, %v; want r3, r2", page.Runs, err)
	}
}
