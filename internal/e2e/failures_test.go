package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
)

const failing = "internal/e2e/testdata/failing"

// TestRunFailures covers each way a run ends other than COMPLETED, and the
// sandbox's limits, on one helmr dev.
func TestRunFailures(t *testing.T) { forEachTier(t, testRunFailures) }

func testRunFailures(t *testing.T, tier string) {
	d := startDev(t, tier, "HELMR_WORKSPACE_QUOTA=16Mi")
	d.deploy(failing, "--no-build") // its images fail at run time, each task on its own

	t.Run("thrown error", func(t *testing.T) {
		r := d.waitDone(d.trigger("failing", "throws", "null").ID, time.Minute)
		if r.Status != runs.StatusFailed || r.Error == nil || r.Error.Class != runs.ClassTaskProcess ||
			!strings.Contains(r.Error.Message, "boom from the task") || !strings.Contains(r.Error.Stack, "failing") {
			t.Fatalf("run = %s %+v, want FAILED/task_process with the message and a stack", r.Status, r.Error)
		}
		if !strings.Contains(strings.Join(logLines(d.events(r.ID)), "\n"), "about to throw") {
			t.Errorf("logs lack the line printed before the throw")
		}
	})
	t.Run("non-zero exit", func(t *testing.T) {
		r := d.waitDone(d.trigger("failing", "exits", "null").ID, time.Minute)
		if r.Status != runs.StatusFailed || r.Error == nil || r.Error.Class != runs.ClassTaskProcess ||
			!strings.Contains(r.Error.Message, "code 3") {
			t.Fatalf("run = %s %+v, want FAILED/task_process naming exit code 3", r.Status, r.Error)
		}
	})
	t.Run("image without node", func(t *testing.T) {
		r := d.waitDone(d.trigger("failing", "nonode", "null").ID, time.Minute)
		if r.Status != runs.StatusFailed || r.Error == nil || r.Error.Class != runs.ClassImagePreparation ||
			!strings.Contains(r.Error.Message, "node") {
			t.Fatalf("run = %s %+v, want FAILED/image_preparation about node", r.Status, r.Error)
		}
	})
	t.Run("maxDuration", func(t *testing.T) {
		r := d.waitDone(d.trigger("failing", "slow", "null").ID, time.Minute)
		if r.Status != runs.StatusTimedOut || r.Error == nil || r.Error.Class != runs.ClassTimeout {
			t.Fatalf("run = %s %+v, want TIMED_OUT/timeout", r.Status, r.Error)
		}
	})
	t.Run("memory limit", func(t *testing.T) {
		r := d.waitDone(d.trigger("failing", "oom", "null").ID, 2*time.Minute)
		if r.Status != runs.StatusFailed || r.Error == nil || !strings.Contains(r.Error.Message, "memory limit") {
			t.Fatalf("run = %s %+v, want FAILED with a message about the memory limit", r.Status, r.Error)
		}
	})
	{
		t.Run("fork bomb", func(t *testing.T) {
			r := d.waitDone(d.trigger("failing", "forkbomb", "null").ID, 2*time.Minute)
			if r.Status != runs.StatusCompleted {
				t.Fatalf("run = %s %+v, want COMPLETED (the task reports what the limit did)", r.Status, r.Error)
			}
			var out struct {
				Pids int `json:"pids"`
			}
			if err := json.Unmarshal(r.Output, &out); err != nil {
				t.Fatal(err)
			}
			if out.Pids > 1024 {
				t.Errorf("fork bomb: %d processes in the sandbox, want at most the limit of 1024", out.Pids)
			}
			// gVisor refuses the forks inside its own kernel and does not tell
			// the host (its Stats().PidsLimitHit stays false).
			if tier == "process" && !hasSystemEvent(d.events(r.ID), "process limit") {
				t.Errorf("no event says the sandbox hit its process limit")
			}
			assertNoSandboxProcesses(t, d.sandboxID(r.ID), 5*time.Second)
		})
	}
	t.Run("workspace quota", func(t *testing.T) {
		r := d.waitDone(d.trigger("failing", "fill", "null").ID, 2*time.Minute)
		if r.Status != runs.StatusFailed || r.Error == nil || r.Error.Class != runs.ClassTaskProcess || !strings.Contains(r.Error.Message, "ENOSPC") {
			t.Fatalf("run = %s %+v, want FAILED/task_process on ENOSPC", r.Status, r.Error)
		}
		if !hasSystemEvent(d.events(r.ID), "the workspace reached its quota of 16Mi") {
			t.Errorf("no event says the workspace reached its quota")
		}
		var st syscall.Stat_t
		img := filepath.Join(d.dataDir, "workspaces", r.WorkspaceID+".img")
		if err := syscall.Stat(img, &st); err != nil || st.Blocks*512 > 16<<20 {
			t.Errorf("workspace image %s: %d bytes on the host (%v), want at most the 16 MiB quota", img, st.Blocks*512, err)
		}
		// The worker goes on: the next run completes.
		if next := d.waitDone(d.trigger("failing", "probe", `{"hostPid":1,"port":1}`).ID, time.Minute); next.Status != runs.StatusCompleted {
			t.Errorf("run after the full workspace = %s %+v", next.Status, next.Error)
		}
	})
	t.Run("no worker fits", func(t *testing.T) {
		r := d.trigger("failing", "oversized", "null")
		evs := d.events(r.ID)
		if !hasSystemEvent(evs, "no connected worker can take this run") || !hasSystemEvent(evs, "needs 64 vCPUs") {
			t.Errorf("events of the oversized run = %+v, want one saying no worker can take it and why", evs)
		}
		if got, _ := d.api.GetRun(context.Background(), r.ID); got.Status != runs.StatusQueued {
			t.Errorf("oversized run = %s, want QUEUED", got.Status)
		}
		d.mustHelmr("cancel", r.ID)
	})
	t.Run("cancel", func(t *testing.T) {
		r := d.trigger("failing", "sleeper", "null")
		waitFor(t, 30*time.Second, func() bool {
			return len(logLines(d.events(r.ID))) > 2
		})
		sbx := d.sandboxID(r.ID)
		if procs := sandboxProcesses(sbx); len(procs) == 0 {
			t.Fatalf("no host process of sandbox %s before cancel: the check below would prove nothing", sbx)
		}
		d.mustHelmr("cancel", r.ID)
		canceledAt := time.Now()
		got := d.waitDone(r.ID, 5*time.Second)
		if got.Status != runs.StatusCanceled {
			t.Fatalf("run = %s, want CANCELED", got.Status)
		}
		assertNoSandboxProcesses(t, sbx, time.Second-time.Since(canceledAt))
		if _, _, code := d.helmr("cancel", r.ID); code != 0 {
			t.Errorf("cancelling a canceled run again exited %d, want 0", code)
		}
	})
}

// TestSandboxIsolation runs a probe task inside the sandbox and checks what
// it could see and do.
func TestSandboxIsolation(t *testing.T) { forEachTier(t, testSandboxIsolation) }

func testSandboxIsolation(t *testing.T, tier string) {
	d := startDev(t, tier)
	d.deploy(failing, "--no-build") // its images fail at run time, each task on its own
	ln := acceptAndClose(t, "127.0.0.1:0")
	payload := fmt.Sprintf(`{"hostPid":%d,"port":%d}`, os.Getpid(), ln.Addr().(*net.TCPAddr).Port)
	r := d.waitDone(d.trigger("failing", "probe", payload).ID, time.Minute)
	if r.Status != runs.StatusCompleted {
		t.Fatalf("probe run = %s %+v", r.Status, r.Error)
	}
	var p struct {
		HostPidVisible                                                    bool
		Interfaces, NetDev, UIDMap                                        []string
		ConnectHost, WriteEtc, WriteUsr, WriteRoot, WriteTmp, WriteWorksp string
		CapEff, Hostname, Cwd                                             string
	}
	dec := json.NewDecoder(bytes.NewReader(r.Output))
	if err := dec.Decode(&p); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	_ = json.Unmarshal(r.Output, &raw)
	p.WriteWorksp, _ = raw["writeWorkspace"].(string)
	checks := []struct {
		name string
		ok   bool
	}{
		{"host processes invisible", !p.HostPidVisible},
		// The default egress policy (open) gives the sandbox eth0 next to lo.
		{"eth0 and lo (/sys/class/net)", len(p.Interfaces) == 0 || strings.Join(p.Interfaces, ",") == "eth0,lo"},
		{"eth0 and lo (/proc/net/dev)", strings.Join(sorted(p.NetDev), ",") == "eth0,lo"},
		{"host loopback listener unreachable", p.ConnectHost != "connected"},
		// The root is writable as a container's (a layer discarded with
		// the sandbox: TestWritableRoot).
		{"can write /etc", p.WriteEtc == "ok"},
		{"can write /usr", p.WriteUsr == "ok"},
		{"can write /", p.WriteRoot == "ok"},
		{"can write /tmp", p.WriteTmp == "ok"},
		{"can write the workspace", p.WriteWorksp == "ok"},
		// On the process tier sandbox root is an unprivileged host uid; on
		// gVisor and in a microVM task code is no host process at all
		// (uid_map is the guest kernel's own identity map; host pid
		// invisibility covers it).
		{"not host root", tier == "gvisor" || tier == "microvm" || len(p.UIDMap) == 3 && !(p.UIDMap[0] == "0" && p.UIDMap[1] == "0")},
		{"no capabilities", strings.Trim(p.CapEff, "0") == ""},
		{"hostname", p.Hostname == "helmr-sandbox"},
		{"cwd is the workspace", p.Cwd == "/workspace"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: probe reported %s", c.name, r.Output)
		}
	}
	if _, err := workspaceFile(t, d.dataDir, r.WorkspaceID, "probe.txt"); err != nil {
		t.Errorf("the workspace write did not reach the host: %v", err)
	}
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	slices.Sort(s)
	return s
}

// sandboxID reads which sandbox ran the run from its "sandbox started" event.
func (d *dev) sandboxID(runID string) string {
	d.t.Helper()
	for _, ev := range d.events(runID) {
		var s runs.SystemData
		if ev.Type == runs.EventSystem && json.Unmarshal(ev.Data, &s) == nil && s.Attrs["sandbox"] != "" {
			return s.Attrs["sandbox"]
		}
	}
	d.t.Fatalf("run %s has no event naming its sandbox", runID)
	return ""
}

// assertNoSandboxProcesses checks, within d, that no host process carries
// the sandbox's id in its environment (every sandbox process does).
func assertNoSandboxProcesses(t *testing.T, sandboxID string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		alive := sandboxProcesses(sandboxID)
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of sandbox %s still alive: %v", sandboxID, alive)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sandboxProcesses lists the host pids of a sandbox: processes whose
// environment names it (the process tier's task processes), whose
// command line does (gVisor's runsc, gofer and sandbox processes) or
// whose cgroup is the microvm tier's for it (QEMU: helmr-microvm/<id>).
func sandboxProcesses(sandboxID string) []string {
	marker := []byte("HELMR_SANDBOX_ID=" + sandboxID + "\x00")
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cg, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err == nil && bytes.Contains(env, marker) || bytes.Contains(cmd, []byte(sandboxID)) ||
			bytes.Contains(cg, []byte("/helmr-microvm/"+sandboxID+"\n")) {
			out = append(out, e.Name())
		}
	}
	return out
}

func hasSystemEvent(evs []runs.Event, substr string) bool {
	for _, ev := range evs {
		var s runs.SystemData
		if ev.Type == runs.EventSystem && json.Unmarshal(ev.Data, &s) == nil && strings.Contains(s.Message, substr) {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("condition not met in time")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// acceptAndClose listens on addr (TCP) until t ends, closing every
// connection it accepts: a port that answers, for probes of reachability.
func acceptAndClose(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln
}
