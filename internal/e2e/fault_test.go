package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/testenv"
	"github.com/helmr/helmr/internal/workspaces"
)

// faultLoad is what the fault test submitted, and what it saw.
type faultLoad struct {
	mu        sync.Mutex
	ids       map[string]string // run id -> task
	writes    map[string]string // writer run id -> its key
	spaces    map[string]string // writer run id -> its workspace
	approved  map[string]bool
	submitted atomic.Int64
}

// TestFaultsUnderLoad: on a multi-host cluster (two replicas behind a
// load balancer on PostgreSQL and S3, three gVisor workers each on its
// own "host"), a stream of runs (short ones, ones that park waiting for
// approval, ones that write their workspace) goes on while a random
// worker is killed (SIGKILL) every few seconds and started again, a
// replica is killed and started again, and PostgreSQL is restarted once.
// Then: every run completed exactly once, with no gap or duplicate in its
// events; every approved parked run returned the nonce it held in memory
// before it parked; every completed writer's file is in its workspace;
// and, once the workers are stopped, nothing of theirs is left on any
// host. The figures are printed.
func TestFaultsUnderLoad(t *testing.T) {
	testenv.RequireRoot(t)
	requireTier(t, "gvisor")
	testenv.BaseRootfs(t)
	loadFor := 40 * time.Second
	if v := os.Getenv("HELMR_FAULT_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("HELMR_FAULT_SECONDS=%q: %v", v, err)
		}
		loadFor = time.Duration(n) * time.Second
	}
	c := upCluster(t, []string{"--workers", "3", "--replicas", "2", "--runtime", "gvisor"},
		"HELMR_WORKER_TTL=3s", "HELMR_HEARTBEAT=500ms", "HELMR_PARK_AFTER=1s", "HELMR_SLOTS=3")
	d := c.cli(testenv.Binaries(t))
	api := d.api
	d.deploy("internal/e2e/testdata/faults")
	ctx := t.Context()
	var spaces []string
	for range 3 {
		ws, err := retrying(ctx, func() (workspaces.Workspace, error) {
			return api.CreateWorkspace(ctx, "faults", "dev", workspaces.CreateRequest{Sandbox: "faults"})
		})
		if err != nil {
			t.Fatalf("create a workspace: %v", err)
		}
		spaces = append(spaces, ws.ID)
	}

	load := &faultLoad{ids: map[string]string{}, writes: map[string]string{}, spaces: map[string]string{}, approved: map[string]bool{}}
	loadCtx, stopLoad := context.WithTimeout(ctx, loadFor)
	defer stopLoad()
	var wg sync.WaitGroup
	wg.Go(func() { submit(loadCtx, t, api, load, spaces) })
	approveCtx, stopApprover := context.WithCancel(ctx)
	defer stopApprover()
	wg.Go(func() { approveParked(approveCtx, api, load) })
	chaos := make(chan string, 100)
	wg.Go(func() { injectFaults(loadCtx, t, c, chaos) })

	<-loadCtx.Done()
	// The load is over: every run must now finish.
	deadline := time.Now().Add(4 * time.Minute)
	pending := func() []string {
		load.mu.Lock()
		ids := make([]string, 0, len(load.ids))
		for id := range load.ids {
			ids = append(ids, id)
		}
		load.mu.Unlock()
		var out []string
		for _, id := range ids {
			r, err := api.GetRun(ctx, id)
			if err != nil || !r.Status.Terminal() {
				out = append(out, id)
			}
		}
		return out
	}
	for left := pending(); len(left) > 0; left = pending() {
		if time.Now().After(deadline) {
			t.Errorf("%d runs not finished 4 minutes after the load ended, e.g. %s", len(left), left[0])
			break
		}
		time.Sleep(time.Second)
	}
	stopApprover()
	wg.Wait()
	close(chaos)
	var faults []string
	for f := range chaos {
		faults = append(faults, f)
	}

	// Count.
	var completed, retried, lost, dups, gaps, badMemory, lostFiles, approvedParked int
	load.mu.Lock()
	defer load.mu.Unlock()
	for id, task := range load.ids {
		r, err := api.GetRun(ctx, id)
		if err != nil {
			t.Errorf("run %s: %v", id, err)
			lost++
			continue
		}
		if len(r.Attempts) > 0 {
			retried++
		}
		if r.Status != runs.StatusCompleted {
			lost++
			if lost <= 5 {
				t.Errorf("run %s (%s) ended %s: %+v; events:\n%s", id, task, r.Status, r.Error, systemMessages(d.events(id)))
			}
			continue
		}
		completed++
		evs := allEvents(t, api, id)
		terminal := 0
		for i, ev := range evs {
			if ev.Seq != int64(i+1) {
				gaps++
				t.Errorf("run %s: event %d has seq %d", id, i+1, ev.Seq)
				break
			}
			var sd runs.StatusData
			if ev.Type == runs.EventStatus && json.Unmarshal(ev.Data, &sd) == nil && sd.To.Terminal() {
				terminal++
			}
		}
		if terminal != 1 {
			dups += max(terminal-1, 0)
			t.Errorf("run %s reached a terminal state %d times", id, terminal)
		}
		switch task {
		case "approval":
			if !load.approved[id] {
				continue
			}
			approvedParked++
			want := nonceBeforePark(evs)
			var out struct{ Nonce string }
			if err := json.Unmarshal(r.Output, &out); err != nil || want == "" || out.Nonce != want {
				badMemory++
				t.Errorf("approved run %s returned %s, want the nonce %q it logged before it parked; events:\n%s", id, r.Output, want, systemMessages(evs))
			}
		case "writer":
			key := load.writes[id]
			// A read handed to a worker that was killed just then fails
			// naming it (errdefs.ErrUnavailable): a client reads again.
			var got []byte
			var err error
			for try := 0; try < 3; try++ {
				rctx, cancel := context.WithTimeout(ctx, time.Minute)
				got, err = api.ReadFile(rctx, load.spaces[id], "files/"+key+".txt")
				cancel()
				if !errors.Is(err, errdefs.ErrUnavailable) {
					break
				}
				t.Logf("read of %s's file again after: %v", id, err)
			}
			if err != nil || string(got) != key {
				lostFiles++
				t.Errorf("workspace %s lost completed run %s's file: %q, %v", load.spaces[id], id, got, err)
			}
		}
	}

	// Stop the workers as an operator would (SIGTERM): what a killed
	// worker left and its successor did not clean up is still there.
	orphans := stopWorkersAndFindOrphans(t, c)
	t.Logf("fault test: %s of load; faults: %s", loadFor, strings.Join(faults, ", "))
	fmt.Printf("fault test: runs submitted %d, completed %d, retried %d, lost %d, duplicate completions %d, event gaps %d, "+
		"approved parked runs %d (with wrong memory %d), workspace files lost %d, orphans %d; faults injected: %d (%s)\n",
		load.submitted.Load(), completed, retried, lost, dups, gaps, approvedParked, badMemory, lostFiles, len(orphans), len(faults), strings.Join(faults, ", "))
	if lost+dups+gaps+badMemory+lostFiles+len(orphans) > 0 {
		t.Errorf("lost %d, duplicates %d, gaps %d, wrong memory %d, files lost %d, orphans %d %v", lost, dups, gaps, badMemory, lostFiles, len(orphans), orphans)
	}
	if completed == 0 || len(faults) < 3 {
		t.Errorf("the test proves nothing: %d runs completed, %d faults injected", completed, len(faults))
	}
}

// retrying calls f until it succeeds or ctx ends: the API may be away for
// a moment while a replica or the database restarts.
func retrying[T any](ctx context.Context, f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err == nil || errors.Is(err, errdefs.ErrInvalid) || errors.Is(err, errdefs.ErrNotFound) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// submit triggers runs until ctx ends: half short, a quarter waiting for
// approval, a quarter writing a workspace. Each trigger has an
// idempotency key, so a retried request makes no second run.
func submit(ctx context.Context, t *testing.T, api *client.Client, load *faultLoad, spaces []string) {
	for i := 0; ctx.Err() == nil; i++ {
		task, o := "short", client.TriggerOptions{Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), IdempotencyKey: fmt.Sprintf("fault-%d", i)}
		key, ws := "", ""
		switch i % 4 {
		case 1:
			task = "approval"
		case 3:
			task, key, ws = "writer", fmt.Sprintf("k%d", i), spaces[i%len(spaces)]
			o.Payload, o.WorkspaceID = json.RawMessage(fmt.Sprintf(`{"key":%q}`, key)), ws
		}
		// The trigger must land even past the load's end: it may be
		// in flight when the load stops.
		r, err := retrying(context.WithoutCancel(ctx), func() (runs.Run, error) {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			r, _, err := api.Trigger(tctx, "faults", "dev", task, o)
			return r, err
		})
		if err != nil {
			t.Errorf("trigger %s #%d: %v", task, i, err)
			return
		}
		load.mu.Lock()
		if _, seen := load.ids[r.ID]; !seen {
			load.submitted.Add(1)
		}
		load.ids[r.ID] = task
		if key != "" {
			load.writes[r.ID], load.spaces[r.ID] = key, ws
		}
		load.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// approveParked approves the approval runs that have parked, until ctx
// ends.
func approveParked(ctx context.Context, api *client.Client, load *faultLoad) {
	for ctx.Err() == nil {
		load.mu.Lock()
		var todo []string
		for id, task := range load.ids {
			if task == "approval" && !load.approved[id] {
				todo = append(todo, id)
			}
		}
		load.mu.Unlock()
		for _, id := range todo {
			r, err := api.GetRun(ctx, id)
			if err != nil || r.Status != runs.StatusWaiting {
				continue
			}
			if !slices.ContainsFunc(allEventsQuiet(ctx, api, id), func(ev runs.Event) bool {
				return ev.Type == runs.EventSystem && bytes.Contains(ev.Data, []byte(`"parked: checkpoint `))
			}) {
				continue
			}
			if _, err := api.Approve(ctx, id, json.RawMessage(`{"ok":true}`)); err == nil || errors.Is(err, errdefs.ErrConflict) {
				load.mu.Lock()
				load.approved[id] = true
				load.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// injectFaults kills a random worker every few seconds and starts it
// again; once, a replica; once, it restarts PostgreSQL. Each fault is
// sent on done as it is made.
func injectFaults(ctx context.Context, t *testing.T, c *cluster, done chan<- string) {
	workers, _ := strconv.Atoi(c.exports["HELMR_CLUSTER_WORKERS"])
	step := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(4 * time.Second):
		}
		step++
		var fault []string
		switch step {
		case 3:
			fault = []string{"replica", "1"}
		case 6:
			fault = []string{"postgres"}
		default:
			fault = []string{"worker", strconv.Itoa(1 + rand.IntN(workers))}
		}
		if fault[0] == "postgres" {
			if _, errOut, err := c.tryScript("restart", "postgres"); err != nil {
				t.Errorf("restart postgres: %v: %s", err, errOut)
				return
			}
			done <- "postgres restarted"
			continue
		}
		if _, errOut, err := c.tryScript("kill", fault[0], fault[1]); err != nil {
			t.Errorf("kill %s: %v: %s", strings.Join(fault, " "), err, errOut)
			return
		}
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
		if _, errOut, err := c.tryScript("start", fault[0], fault[1]); err != nil {
			t.Errorf("start %s: %v: %s", strings.Join(fault, " "), err, errOut)
			return
		}
		done <- fault[0] + " " + fault[1] + " killed and restarted"
	}
}

// allEvents reads every event of run id.
func allEvents(t *testing.T, api *client.Client, id string) []runs.Event {
	t.Helper()
	evs := allEventsQuiet(t.Context(), api, id)
	if evs == nil {
		t.Errorf("no events of run %s", id)
	}
	return evs
}

func allEventsQuiet(ctx context.Context, api *client.Client, id string) []runs.Event {
	var out []runs.Event
	var after int64
	for {
		p, err := api.Events(ctx, id, after)
		if err != nil {
			return out
		}
		out = append(out, p.Events...)
		if len(p.Events) == 0 || p.NextCursor <= after {
			return out
		}
		after = p.NextCursor
	}
}

// nonceBeforePark is the nonce an approval run logged last before it last
// parked: the one in the memory its checkpoint holds.
func nonceBeforePark(evs []runs.Event) string {
	nonce, atPark := "", ""
	for _, ev := range evs {
		switch ev.Type {
		case runs.EventLog:
			var l runs.LogData
			if json.Unmarshal(ev.Data, &l) == nil && strings.HasPrefix(l.Line, "nonce ") {
				nonce = strings.TrimSpace(strings.TrimPrefix(l.Line, "nonce "))
			}
		case runs.EventSystem:
			if bytes.Contains(ev.Data, []byte(`"parked: checkpoint `)) {
				atPark = nonce
			}
		}
	}
	return atPark
}

// stopWorkersAndFindOrphans stops every worker with SIGTERM and returns
// what is left of them on their hosts: processes whose command line or
// environment names a host's directory, mounts under it, and runsc
// containers in their state directories.
func stopWorkersAndFindOrphans(t *testing.T, c *cluster) []string {
	t.Helper()
	workers, _ := strconv.Atoi(c.exports["HELMR_CLUSTER_WORKERS"])
	for k := 1; k <= workers; k++ {
		pid := c.workerPID(k)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		for i := 0; i < 300 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("worker %d (pid %d) did not stop within 30s of SIGTERM", k, pid)
		}
	}
	hosts := filepath.Join(c.dir, "hosts")
	var orphans []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join(p, f))
			if err == nil && bytes.Contains(b, []byte(hosts)) {
				orphans = append(orphans, fmt.Sprintf("process %s: %s", filepath.Base(p), strings.ReplaceAll(string(b[:min(len(b), 160)]), "\x00", " ")))
				break
			}
		}
	}
	if mounts, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for line := range strings.SplitSeq(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], hosts) {
				orphans = append(orphans, "mount "+f[4])
			}
		}
	}
	return orphans
}
