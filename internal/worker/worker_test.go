package worker

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/agent/channel"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/workers"
	"github.com/helmr/helmr/internal/workspaces"
)

// fakeControl is a hand-written ControlPlane that records what the worker
// reports.
type fakeControl struct {
	snaps    *fakeSnapshots // nil: the control plane keeps no snapshots
	moved    []string       // workspaces StaleWorkspaces says moved away
	secrets  map[string][]byte
	egress   map[string]*vault.Egress // rules of secrets bound for egress
	notes    []runs.SystemData
	mu       sync.Mutex
	files    map[string][]byte
	status   runs.Status
	started  string
	outcome  *runs.Outcome
	finished chan struct{}
}

func (f *fakeControl) Lease(context.Context, string, workers.Capabilities) (Lease, error) {
	return Lease{}, ErrNoWork
}
func (f *fakeControl) Files(context.Context, string) (map[string][]byte, error) {
	return f.files, nil
}
func (f *fakeControl) Started(_ context.Context, _, _, tier string, note runs.SystemData) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started, f.status = tier, runs.StatusRunning
	f.notes = append(f.notes, note)
	return nil
}
func (f *fakeControl) Heartbeat(context.Context, string, workers.Capabilities) error { return nil }
func (f *fakeControl) RunSecrets(context.Context, string) (map[string]runs.BoundSecret, error) {
	out := map[string]runs.BoundSecret{}
	for k, v := range f.secrets {
		out[k] = runs.BoundSecret{Value: v, Egress: f.egress[k]}
	}
	return out, nil
}
func (f *fakeControl) BuildSecret(_ context.Context, _, name string) (runs.BoundSecret, error) {
	v, ok := f.secrets[name]
	if !ok {
		return runs.BoundSecret{}, errors.New("no such build secret")
	}
	return runs.BoundSecret{Value: v}, nil
}
func (f *fakeControl) NextOp(ctx context.Context, _, _ string) (workspaces.Op, error) {
	<-ctx.Done()
	return workspaces.Op{}, workspaces.ErrNoOp
}
func (f *fakeControl) FinishOp(context.Context, string, workspaces.OpResult) error { return nil }
func (f *fakeControl) OpOutput(context.Context, string, workspaces.OpOutput) error { return nil }
func (f *fakeControl) StaleWorkspaces(context.Context, string, []string) ([]string, []string, error) {
	return nil, f.moved, nil
}
func (f *fakeControl) Logs(context.Context, string, []runs.LogData, time.Time) error { return nil }
func (f *fakeControl) Finish(_ context.Context, _ string, o runs.Outcome) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outcome = &o
	return nil
}
func (f *fakeControl) Status(context.Context, string) (runs.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status, nil
}

// fakeRuntime starts fakeSandboxes whose Exec behaviour the test sets.
type fakeRuntime struct {
	mu       sync.Mutex
	starts   int
	destroys int
	startErr error
	exec     func(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error)
	stats    sandbox.Stats
	spec     sandbox.Spec
	// nodeVersion is what the image's node reports (default 22.23.3).
	nodeVersion string
	files       []sandbox.File // placed with WriteFile
}

func (r *fakeRuntime) Name() string { return "fake" }
func (r *fakeRuntime) Start(_ context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts++
	r.spec = spec
	if r.startErr != nil {
		return nil, r.startErr
	}
	return fakeSandbox{r}, nil
}

type fakeSandbox struct{ r *fakeRuntime }

func (s fakeSandbox) WriteFile(_ context.Context, f sandbox.File) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.files = append(s.r.files, f)
	return nil
}

// Exec plays the adapter: it reports itself started, waits for the start
// message, then behaves as the test's exec func says.
func (s fakeSandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	if req.Started == nil && slices.Equal(req.Argv[1:], []string{"-p", "process.versions.node"}) {
		v := s.r.nodeVersion
		if v == "" {
			v = "22.23.3"
		}
		req.OnOutput("stdout", []byte(v+"\n"))
		return sandbox.ExitStatus{}, nil
	}
	if req.Started == nil && !req.Channel {
		return sandbox.ExitStatus{}, nil // a workspace's command
	}
	started := make(chan []byte, 1)
	req.Started(fakeSender(started))
	select {
	case msg := <-started:
		var m channel.Start
		if err := json.Unmarshal(msg, &m); err != nil || m.Type != "start" || m.Env["HELMR_RUN_ID"] != "run_1" {
			return sandbox.ExitStatus{}, fmt.Errorf("bad start message %s", msg)
		}
	case <-ctx.Done():
		return sandbox.ExitStatus{Signal: "killed"}, ctx.Err()
	}
	return s.r.exec(ctx, req)
}

type fakeSender chan []byte

func (f fakeSender) Send(msg []byte) error {
	f <- msg
	return nil
}
func (s fakeSandbox) Stats() sandbox.Stats { return s.r.stats }
func (s fakeSandbox) Destroy(context.Context) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.destroys++
	return nil
}

func newTestWorker(t *testing.T, rt *fakeRuntime, cp *fakeControl) *Worker {
	t.Helper()
	bases := t.TempDir()
	node := filepath.Join(bases, "base", "rootfs", "usr", "local", "bin", "node")
	if err := os.MkdirAll(filepath.Dir(node), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(node, nil, 0o755)
	os.WriteFile(filepath.Join(bases, "base", "config.json"), []byte(`{"env":{"PATH":"/usr/local/bin:/usr/bin"}}`), 0o644)
	w, err := New(Config{ID: "w1", DataDir: t.TempDir(), Runtime: rt, Control: cp, Adapter: []byte("//"),
		Images: &images.Resolver{BasesDir: bases, LayersDir: t.TempDir()}, Logger: slog.Default(), CancelPoll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func lease(maxDur int, steps ...deployments.Step) Lease {
	return Lease{
		Run: runs.Run{ID: "run_1", TaskID: "t", DeploymentID: "dep_1", Payload: json.RawMessage(`{"a":1}`), MaxDurationSec: maxDur},
		Task: deployments.TaskManifest{ID: "t", Module: "bundles/t.mjs", Export: "t", HasRun: true,
			Sandbox: &deployments.SandboxManifest{Name: "s", Resources: deployments.Resources{Memory: "256Mi"},
				Image: &deployments.ImageManifest{Name: "i", Steps: append([]deployments.Step{{Kind: "from", Ref: "helmr/base"}}, steps...)}}},
	}
}

func reply(msg string) func(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	return func(_ context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
		req.OnOutput("stdout", []byte("hi\n"))
		if msg != "" {
			req.OnMessage([]byte(msg))
		}
		return sandbox.ExitStatus{}, nil
	}
}

func TestOutcomes(t *testing.T) {
	cases := []struct {
		name   string
		rt     *fakeRuntime
		lease  Lease
		status runs.Status
		class  runs.FailureClass
	}{
		{"result", &fakeRuntime{exec: reply(`{"type":"result","output":{"ok":true}}`)}, lease(60), runs.StatusCompleted, ""},
		{"thrown", &fakeRuntime{exec: reply(`{"type":"error","message":"boom","stack":"at x"}`)}, lease(60), runs.StatusFailed, runs.ClassTaskProcess},
		{"exit without result", &fakeRuntime{exec: reply("")}, lease(60), runs.StatusFailed, runs.ClassTaskProcess},
		{"oom", &fakeRuntime{exec: reply(""), stats: sandbox.Stats{OOMKilled: true}}, lease(60), runs.StatusFailed, runs.ClassTaskProcess},
		{"sandbox start", &fakeRuntime{startErr: sandbox.ErrGuestRuntime}, lease(60), runs.StatusFailed, runs.ClassGuestRuntime},
		{"agent failure", &fakeRuntime{exec: func(context.Context, sandbox.ExecRequest) (sandbox.ExitStatus, error) {
			return sandbox.ExitStatus{}, errors.New("agent connection lost")
		}}, lease(60), runs.StatusFailed, runs.ClassGuestRuntime},
		{"node too old", &fakeRuntime{nodeVersion: "18.19.0", exec: reply(`{"type":"result","output":1}`)}, lease(60), runs.StatusFailed, runs.ClassImagePreparation},
		{"run step on a tier that cannot build", &fakeRuntime{startErr: fmt.Errorf("%w: the process tier cannot run image build steps", sandbox.ErrInvalidSpec)},
			lease(60, deployments.Step{Kind: "run", Argv: []string{"true"}}), runs.StatusFailed, runs.ClassImagePreparation},
		{"reported, exit never comes", &fakeRuntime{exec: func(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
			req.OnMessage([]byte(`{"type":"result","output":7}`))
			<-ctx.Done() // the sandbox's destruction ends it
			return sandbox.ExitStatus{Signal: "killed"}, ctx.Err()
		}}, lease(60), runs.StatusCompleted, ""},
		{"timeout", &fakeRuntime{exec: func(ctx context.Context, _ sandbox.ExecRequest) (sandbox.ExitStatus, error) {
			<-ctx.Done()
			return sandbox.ExitStatus{Signal: "killed"}, nil
		}}, lease(1), runs.StatusTimedOut, runs.ClassTimeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cp := &fakeControl{files: map[string][]byte{"bundles/t.mjs": []byte("x")}, status: runs.StatusStarting}
			w := newTestWorker(t, c.rt, cp)
			w.execute(context.Background(), c.lease)
			if cp.outcome == nil {
				t.Fatal("no outcome reported")
			}
			if cp.outcome.Status != c.status {
				t.Fatalf("status = %s (%+v), want %s", cp.outcome.Status, cp.outcome.Error, c.status)
			}
			if c.class != "" && (cp.outcome.Error == nil || cp.outcome.Error.Class != c.class) {
				t.Errorf("error = %+v, want class %s", cp.outcome.Error, c.class)
			}
		})
	}
}

func TestCanceledRunReportsNothing(t *testing.T) {
	cp := &fakeControl{files: map[string][]byte{"bundles/t.mjs": []byte("x")}, status: runs.StatusStarting}
	rt := &fakeRuntime{exec: func(ctx context.Context, _ sandbox.ExecRequest) (sandbox.ExitStatus, error) {
		cp.mu.Lock()
		cp.status = runs.StatusCanceled
		cp.mu.Unlock()
		<-ctx.Done()
		return sandbox.ExitStatus{Signal: "killed"}, nil
	}}
	w := newTestWorker(t, rt, cp)
	w.execute(context.Background(), lease(60))
	if cp.outcome != nil {
		t.Errorf("canceled run reported %+v, want nothing (the control plane already has CANCELED)", cp.outcome)
	}
	if rt.spec.Workspace != "/workspace" || rt.spec.MemoryBytes != 256<<20 {
		t.Errorf("spec = %+v, want /workspace and 256Mi", rt.spec)
	}
}

// TestRootSize: the sandbox's root size is the task's rootSize, else the
// worker's default; sandboxes of different root sizes are not
// interchangeable warm.
func TestRootSize(t *testing.T) {
	for _, c := range []struct {
		name     string
		declared string
		worker   int64
		want     int64
	}{
		{"worker default", "", 2 << 30, 2 << 30},
		{"declared", "3Gi", 2 << 30, 3 << 30},
		{"runtime default", "", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			rt := &fakeRuntime{exec: reply(`{"type":"result","output":1}`)}
			cp := &fakeControl{files: map[string][]byte{"bundles/t.mjs": []byte("x")}, status: runs.StatusStarting}
			w := newTestWorker(t, rt, cp)
			w.cfg.RootSize = c.worker
			l := lease(60)
			l.Task.Sandbox.Resources.RootSize = c.declared
			w.execute(context.Background(), l)
			if cp.outcome == nil || cp.outcome.Status != runs.StatusCompleted {
				t.Fatalf("outcome = %+v", cp.outcome)
			}
			if rt.spec.RootSizeBytes != c.want {
				t.Errorf("spec.RootSizeBytes = %d, want %d", rt.spec.RootSizeBytes, c.want)
			}
		})
	}
	a, b := prepared{}, prepared{}
	b.spec.RootSizeBytes = 2 << 30
	if bootKey("gvisor", a) == bootKey("gvisor", b) {
		t.Error("bootKey ignores the root size")
	}
}

func TestWarmSandboxes(t *testing.T) {
	rt := &fakeRuntime{exec: reply(`{"type":"result","output":1}`)}
	cp := &fakeControl{files: map[string][]byte{"bundles/t.mjs": []byte("x")}, status: runs.StatusStarting}
	w := newTestWorker(t, rt, cp)
	w.warm = newWarmPool(1)
	for i := 0; i < 3; i++ {
		cp.status = runs.StatusStarting
		os.RemoveAll(w.WorkspaceDir("run_1")) // the fake reuses one run id
		w.execute(context.Background(), lease(60))
		if cp.outcome == nil || cp.outcome.Status != runs.StatusCompleted {
			t.Fatalf("run %d outcome = %+v", i, cp.outcome)
		}
	}
	wantWarm := []string{"false", "true", "true"}
	for i, n := range cp.notes {
		if n.Attrs["warm"] != wantWarm[i] {
			t.Errorf("run %d warm = %q, want %q", i, n.Attrs["warm"], wantWarm[i])
		}
	}
	w.closeWarm(context.Background())
	w.wg.Wait()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.starts != 4 || rt.destroys != 4 {
		t.Errorf("sandboxes started %d, destroyed %d; want 4 and 4 (3 runs + 1 warm)", rt.starts, rt.destroys)
	}
	if ents, _ := os.ReadDir(filepath.Join(w.cfg.DataDir, "booted")); len(ents) != 0 {
		t.Errorf("booted dirs left behind: %v", ents)
	}
}

// TestWarmEviction alternates two sandbox shapes with one warm slot: each
// run evicts the other shape's warm sandbox, and every sandbox started is
// destroyed exactly once.
func TestWarmEviction(t *testing.T) {
	rt := &fakeRuntime{exec: reply(`{"type":"result","output":1}`)}
	cp := &fakeControl{files: map[string][]byte{"bundles/t.mjs": []byte("x")}}
	w := newTestWorker(t, rt, cp)
	w.warm = newWarmPool(1)
	for i := 0; i < 6; i++ {
		cp.status = runs.StatusStarting
		os.RemoveAll(w.WorkspaceDir("run_1"))
		l := lease(60)
		if i%2 == 1 {
			l.Task.Sandbox.Resources.Memory = "512Mi"
		}
		w.execute(context.Background(), l)
		if cp.outcome == nil || cp.outcome.Status != runs.StatusCompleted {
			t.Fatalf("run %d outcome = %+v", i, cp.outcome)
		}
	}
	w.closeWarm(context.Background())
	w.wg.Wait()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.starts != rt.destroys || rt.starts < 6 {
		t.Errorf("sandboxes started %d, destroyed %d; want every one destroyed once", rt.starts, rt.destroys)
	}
}

// kernelRuntime is a fakeRuntime whose sandboxes have a guest kernel.
type kernelRuntime struct{ *fakeRuntime }

func (kernelRuntime) GuestKernelDigest() string { return "runsc@sha256:abc" }

func TestCapabilitiesDigests(t *testing.T) {
	w := newTestWorker(t, &fakeRuntime{}, &fakeControl{})
	base, err := w.cfg.Images.BaseDigest("helmr/base")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := w.cfg.Capabilities.Digests, []string{"rootfs:helmr/base@" + base}; !slices.Equal(got, want) {
		t.Errorf("digests = %q, want %q", got, want)
	}
	kw, err := New(Config{ID: "w2", DataDir: t.TempDir(), Runtime: kernelRuntime{&fakeRuntime{}}, Control: &fakeControl{},
		Adapter: []byte("//"), Images: w.cfg.Images})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kw.cfg.Capabilities.Digests, []string{"kernel:runsc@sha256:abc", "rootfs:helmr/base@" + base}; !slices.Equal(got, want) {
		t.Errorf("digests = %q, want %q", got, want)
	}
}

func TestInstallCACerts(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "proxy CA"}, NotBefore: time.Now(),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	dir := filepath.Join(t.TempDir(), "ca")
	got, err := installCACerts(good, dir)
	if err != nil || got != dir {
		t.Fatalf("installCACerts(good) = %q, %v", got, err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, caFile)); err != nil || !bytes.Contains(b, []byte("BEGIN CERTIFICATE")) {
		t.Errorf("installed file = %q, %v", b, err)
	}
	for name, content := range map[string]string{
		"empty": "", "junk": "not a certificate", "key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})),
	} {
		p := filepath.Join(t.TempDir(), name)
		os.WriteFile(p, []byte(content), 0o600)
		if _, err := installCACerts(p, t.TempDir()); err == nil {
			t.Errorf("installCACerts(%s) accepted it", name)
		}
	}
	if _, err := installCACerts(filepath.Join(t.TempDir(), "missing"), t.TempDir()); err == nil {
		t.Error("a missing file was accepted")
	}
}

func TestSecretPlacementAndRedaction(t *testing.T) {
	l := lease(60)
	l.Task.Secrets = map[string]deployments.SecretTarget{
		"TOKEN": {Env: "API_TOKEN"},
		"KEY":   {File: "/run/secrets/key", Mode: "0440"},
		"CERTS": {Directory: "/run/certs", Files: []string{"ca.pem"}},
	}
	rt := &fakeRuntime{}
	rt.exec = func(_ context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
		req.OnOutput("stdout", []byte("the token is tok"))
		req.OnOutput("stdout", []byte("en-1 and the key is key-2\n"))
		req.OnMessage([]byte(`{"type":"result","output":{"t":"token-1","n":1}}`))
		return sandbox.ExitStatus{}, nil
	}
	cp := &fakeControl{files: map[string][]byte{"bundles/t.mjs": []byte("x")}, status: runs.StatusStarting,
		secrets: map[string][]byte{"TOKEN": []byte("token-1"), "KEY": []byte("key-2"), "CERTS": []byte(`{"ca.pem":"pem-3"}`)}}
	w := newTestWorker(t, rt, cp)
	w.execute(context.Background(), l)
	if cp.outcome == nil || cp.outcome.Status != runs.StatusCompleted {
		t.Fatalf("outcome = %+v", cp.outcome)
	}
	if string(cp.outcome.Output) != `{"t":"[redacted:TOKEN]","n":1}` {
		t.Errorf("output = %s, want the token redacted", cp.outcome.Output)
	}
	got := map[string]sandbox.File{}
	for _, f := range rt.files {
		got[f.Path] = f
	}
	if f := got["/run/secrets/key"]; string(f.Data) != "key-2" || f.Mode != 0o440 || f.Reader == nil {
		t.Errorf("key file = %+v", f)
	}
	if f := got["/run/certs"]; !f.Dir || f.Mode != 0o500 {
		t.Errorf("certs dir = %+v, want a directory with mode 0500", f)
	}
	if f := got["/run/certs/ca.pem"]; string(f.Data) != "pem-3" || f.Mode != 0o400 {
		t.Errorf("ca.pem = %+v", f)
	}

	// A directory secret whose value is not a JSON object fails the run
	// before it starts.
	cp2 := &fakeControl{files: map[string][]byte{"bundles/t.mjs": []byte("x")}, status: runs.StatusStarting,
		secrets: map[string][]byte{"TOKEN": []byte("t"), "KEY": []byte("k"), "CERTS": []byte("not json")}}
	w2 := newTestWorker(t, &fakeRuntime{exec: reply(`{"type":"result","output":1}`)}, cp2)
	w2.execute(context.Background(), l)
	if cp2.outcome == nil || cp2.outcome.Error == nil || cp2.outcome.Error.Class != runs.ClassImagePreparation ||
		!strings.Contains(cp2.outcome.Error.Message, "JSON object") {
		t.Errorf("bad directory value: outcome %+v", cp2.outcome)
	}
}

// errNoWaits: the fake control plane serves no waits (the e2e tests drive them).
var errNoWaits = errors.New("the fake control plane has no waitpoints")

func (f *fakeControl) CreateWaitpoint(context.Context, string, waitpoints.CreateRequest) (waitpoints.Waitpoint, error) {
	return waitpoints.Waitpoint{}, errNoWaits
}

func (f *fakeControl) BeginWait(context.Context, string, string) (waitpoints.Waitpoint, error) {
	return waitpoints.Waitpoint{}, errNoWaits
}

func (f *fakeControl) AwaitWaitpoint(context.Context, string, string) (waitpoints.Waitpoint, error) {
	return waitpoints.Waitpoint{}, errNoWaits
}

func (f *fakeControl) EndWait(context.Context, string, string) error { return errNoWaits }

func (f *fakeControl) TriggerChildren(context.Context, string, runs.ChildrenRequest) (runs.ChildrenResult, error) {
	return runs.ChildrenResult{}, errNoWaits
}

func (f *fakeControl) SessionInput(context.Context, string, int64) ([]runs.Record, error) {
	return nil, errNoWaits
}

func (f *fakeControl) AppendOutput(context.Context, string, string, json.RawMessage) (runs.Record, error) {
	return runs.Record{}, errNoWaits
}

func (f *fakeControl) SetMetadata(context.Context, string, string, json.RawMessage) error {
	return errNoWaits
}
func (f *fakeControl) PutCheckpoint(context.Context, string, string, io.Reader) (int64, error) {
	return 0, errNoWaits
}

func (f *fakeControl) GetCheckpoint(context.Context, string, string) (io.ReadCloser, error) {
	return nil, errNoWaits
}

func (f *fakeControl) Park(context.Context, string, ParkRequest) error { return errNoWaits }

func (f *fakeControl) RestoredCheckpoint(context.Context, string, string) error { return errNoWaits }

func (f *fakeControl) PutWorkspaceSnapshot(ctx context.Context, _, wsID string, seq int64, r io.Reader) (workspaces.Snapshot, error) {
	if f.snaps == nil {
		return workspaces.Snapshot{}, errNoWaits
	}
	return f.snaps.put(wsID, seq, r)
}

func (f *fakeControl) GetWorkspaceSnapshot(ctx context.Context, _, wsID string, seq int64) (io.ReadCloser, error) {
	if f.snaps == nil {
		return nil, errNoWaits
	}
	return f.snaps.get(wsID, seq)
}

func (f *fakeControl) PutWorkspaceCheckpoint(context.Context, string, string, string, io.Reader) (int64, error) {
	return 0, errNoWaits
}

func (f *fakeControl) GetWorkspaceCheckpoint(context.Context, string, string, string) (io.ReadCloser, error) {
	return nil, errNoWaits
}
