package worker

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/testenv"
)

// diskGuestRuntime is a fakeRuntime whose sandboxes are disk guests (a
// VM's traits), recording at each Start what the tier would see.
type diskGuestRuntime struct {
	*fakeRuntime
	noBoundary string

	mu     sync.Mutex
	starts []guestStart
}

// guestStart is what a disk guest saw at Start.
type guestStart struct {
	spec     sandbox.Spec
	attached bool   // the workspace image was mounted on the host
	task     []byte // /opt/helmr/task/bundles/t.mjs in HelmrHost, if there
}

func (r *diskGuestRuntime) Traits() sandbox.Traits {
	return sandbox.Traits{DiskGuest: true, NoBoundary: r.noBoundary}
}

func (r *diskGuestRuntime) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	st := guestStart{spec: spec, attached: spec.WorkspaceImage != "" && disk.Attached(spec.WorkspaceImage)}
	st.task, _ = os.ReadFile(filepath.Join(spec.HelmrHost, "task", "bundles", "t.mjs"))
	r.mu.Lock()
	r.starts = append(r.starts, st)
	r.mu.Unlock()
	return r.fakeRuntime.Start(ctx, spec)
}

func newDiskGuestWorker(t *testing.T, rt sandbox.Runtime, cp *fakeControl, quota int64) (*Worker, error) {
	t.Helper()
	w := newTestWorker(t, &fakeRuntime{}, cp) // its image resolver
	return New(Config{ID: "w1", DataDir: t.TempDir(), Runtime: rt, Control: cp, Adapter: []byte("//"), Images: w.cfg.Images,
		Logger: slog.Default(), CancelPoll: 10 * time.Millisecond, WorkspaceQuota: quota, Warm: 1})
}

// TestDiskGuestNeedsAQuota: a worker on a disk guest keeps every
// workspace as a disk, so it refuses to run without a quota.
func TestDiskGuestNeedsAQuota(t *testing.T) {
	rt := &diskGuestRuntime{fakeRuntime: &fakeRuntime{}}
	if _, err := newDiskGuestWorker(t, rt, &fakeControl{}, 0); err == nil || !strings.Contains(err.Error(), "HELMR_WORKSPACE_QUOTA") {
		t.Errorf("New(disk guest, no quota) = %v, want an error naming HELMR_WORKSPACE_QUOTA", err)
	}
}

// TestDiskGuestRuns runs a task three times on a disk guest with a warm
// pool, then once more with a bundle too large for the agent: each
// sandbox gets its workspace as an image mounted nowhere, a cold boot
// finds the task in its helmr dir at Start, a warm one gets it through
// WriteFile, the run's workspace image is kept under its name, nothing
// is left in booted/, and the start event says the tier is no boundary.
func TestDiskGuestRuns(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Require(t, disk.Check() == nil, "workspace disks need loop devices and e2fsprogs")
	rt := &diskGuestRuntime{fakeRuntime: &fakeRuntime{exec: reply(`{"type":"result","output":1}`)}, noBoundary: "emulated, NOT a boundary"}
	bundle := []byte("export const t = 1;\n")
	cp := &fakeControl{files: map[string][]byte{"bundles/t.mjs": bundle}}
	w, err := newDiskGuestWorker(t, rt, cp, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), maxPlacedFile+1)
	for i, files := range []map[string][]byte{cp.files, cp.files, cp.files, {"bundles/t.mjs": bundle, "bundles/big.mjs": big}} {
		cp.mu.Lock()
		cp.status, cp.files, cp.outcome = runs.StatusStarting, files, nil
		cp.mu.Unlock()
		os.RemoveAll(w.WorkspaceDir("run_1") + ".img") // the fake reuses one run id
		rt.fakeRuntime.mu.Lock()
		rt.fakeRuntime.files = nil
		rt.fakeRuntime.mu.Unlock()
		w.execute(context.Background(), lease(60))
		if cp.outcome == nil || cp.outcome.Status != runs.StatusCompleted {
			t.Fatalf("run %d outcome = %+v", i, cp.outcome)
		}
		if _, err := os.Stat(w.WorkspaceDir("run_1") + ".img"); err != nil {
			t.Errorf("run %d: the run's workspace image: %v", i, err)
		}
		note := cp.notes[len(cp.notes)-1]
		warm := note.Attrs["warm"] == "true"
		if want := i == 1 || i == 2; warm != want {
			t.Errorf("run %d warm = %v, want %v (a bundle over %d bytes boots cold)", i, warm, want, maxPlacedFile)
		}
		if !strings.Contains(note.Message, "NOT a boundary") || note.Attrs["isolation"] != "none" {
			t.Errorf("run %d start event = %+v, want it to say the tier is no boundary", i, note)
		}
		rt.fakeRuntime.mu.Lock()
		placed := rt.fakeRuntime.files
		rt.fakeRuntime.mu.Unlock()
		var task []byte
		for _, f := range placed {
			if f.Path == "/opt/helmr/task/bundles/t.mjs" {
				task = f.Data
			}
		}
		if warm && !bytes.Equal(task, bundle) {
			t.Errorf("run %d (warm): WriteFile placed %v, want the bundle at /opt/helmr/task/bundles/t.mjs", i, placed)
		}
		if !warm && task != nil {
			t.Errorf("run %d (cold): the bundle went through WriteFile, want it in the helmr dir before Start", i)
		}
	}
	w.closeWarm(context.Background())
	w.wg.Wait()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	cold := 0
	for i, st := range rt.starts {
		if st.spec.WorkspaceImage == "" || st.spec.WorkspaceHost != "" || st.attached {
			t.Errorf("start %d: workspace image %q (mounted %v), host dir %q; want an image mounted nowhere, no dir",
				i, st.spec.WorkspaceImage, st.attached, st.spec.WorkspaceHost)
		}
		if st.task != nil {
			cold++
			if !bytes.Equal(st.task, bundle) {
				t.Errorf("start %d: the helmr dir's task = %q, want the bundle", i, st.task)
			}
		}
	}
	if cold != 2 {
		t.Errorf("%d starts had the task in the helmr dir at Start, want 2 (the cold boots)", cold)
	}
	if ents, _ := os.ReadDir(filepath.Join(w.cfg.DataDir, "booted")); len(ents) != 0 {
		t.Errorf("booted dirs left behind: %v", ents)
	}
}

// TestDiskGuestQuotaNote: the host learns that a disk guest's workspace
// filled its quota from the image, after the sandbox is gone.
func TestDiskGuestQuotaNote(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.Require(t, disk.Check() == nil, "workspace disks need loop devices and e2fsprogs")
	for _, tc := range []struct {
		name string
		fill bool
	}{{"room left", false}, {"full", true}} {
		t.Run(tc.name, func(t *testing.T) {
			w := newTestWorker(t, &fakeRuntime{}, &fakeControl{})
			w.traits.DiskGuest = true
			dir := filepath.Join(t.TempDir(), "ws")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			d, err := disk.NewFactory(t.TempDir(), 16<<20).Create(filepath.Join(t.TempDir(), "ws.img"), dir)
			if err != nil {
				t.Fatal(err)
			}
			if tc.fill {
				f, err := os.Create(filepath.Join(dir, "fill"))
				if err != nil {
					t.Fatal(err)
				}
				for i := 0; i < 32; i++ { // twice the quota: it stops at ENOSPC
					if _, err := f.Write(make([]byte, 1<<20)); err != nil {
						break
					}
				}
				f.Close()
			}
			if err := d.Detach(); err != nil {
				t.Fatal(err)
			}
			notes := w.quotaNote(d)
			if got := len(notes) == 1 && strings.Contains(notes[0].Message, "reached its quota of 16Mi"); got != tc.fill {
				t.Errorf("quotaNote = %+v, want a quota note: %v", notes, tc.fill)
			}
		})
	}
}
