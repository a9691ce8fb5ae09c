package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/sandboxtest"
	"github.com/helmr/helmr/internal/testenv"
)

// waitIdle polls until rt's pool holds n idle agents.
func waitIdle(t testing.TB, rt *Runtime, n int) {
	t.Helper()
	if !pollUntil(30*time.Second, func() bool { return rt.pool.idleCount() == n }) {
		t.Fatalf("warm pool holds %d idle agents, want %d", rt.pool.idleCount(), n)
	}
}

func pollUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// idleAgents lists the pool's idle agents.
func idleAgents(rt *Runtime) []*agentProc {
	rt.pool.mu.Lock()
	defer rt.pool.mu.Unlock()
	return append([]*agentProc(nil), rt.pool.idle...)
}

// cgroupName is the last element of cg's directories.
func cgroupName(cg *cgroup) string { return filepath.Base(cg.memory) }

func startSandbox(t *testing.T, rt *Runtime, rootfs, id string) *Sandbox {
	t.Helper()
	sb, err := rt.Start(context.Background(), sandbox.Spec{ID: id, RootLayers: []string{rootfs}, WorkspaceHost: t.TempDir()})
	if err != nil {
		t.Fatalf("Start(%s) = %v", id, err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	st, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"/bin/true"}})
	if err != nil || st.Code != 0 {
		t.Fatalf("Exec(true) in %s = %+v, %v; want code 0", id, st, err)
	}
	return sb.(*Sandbox)
}

// TestWarmPoolClaim: Start takes the warm agent, keeping its cgroup, the
// pool refills, and Destroy removes the pool cgroup.
func TestWarmPoolClaim(t *testing.T) {
	requiresProcessTier(t)
	rootfs := sandboxtest.BaseRootFS(t)
	rt := newWarmRuntime(t, 1)
	warm := idleAgents(rt)[0]
	sb := startSandbox(t, rt, rootfs, "claim")
	if sb.proc != warm || !strings.HasPrefix(cgroupName(sb.cg), poolCgroupPrefix) {
		t.Errorf("Start() used agent in cgroup %s, want the warm agent in %s", cgroupName(sb.cg), cgroupName(warm.cg))
	}
	waitIdle(t, rt, 1)
	if idleAgents(rt)[0] == warm {
		t.Errorf("after Start, the pool still holds the claimed agent")
	}
	dirs := sb.cg.dirs()
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy() = %v", err)
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Destroy, stat %s = %v, want not exist", d, err)
		}
	}
}

// TestWarmPoolClose: Close kills every idle agent and removes its cgroups;
// Start keeps working without the pool.
func TestWarmPoolClose(t *testing.T) {
	requiresProcessTier(t)
	rootfs := sandboxtest.BaseRootFS(t)
	rt := newWarmRuntime(t, 2)
	agents := idleAgents(rt)
	if err := rt.Close(context.Background()); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	for _, a := range agents {
		pid := a.cmd.Process.Pid
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("after Close, kill(%d, 0) = %v, want ESRCH", pid, err)
		}
		for _, d := range a.cg.dirs() {
			if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after Close, stat %s = %v, want not exist", d, err)
			}
		}
	}
	pattern := filepath.Join(filepath.Dir(agents[0].cg.memory), poolCgroupPrefix+"*")
	left, _ := filepath.Glob(pattern)
	for _, d := range left {
		for _, a := range agents {
			if d == a.cg.memory {
				t.Errorf("after Close, %s is left", d)
			}
		}
	}
	if n := rt.pool.idleCount(); n != 0 {
		t.Errorf("after Close, the pool holds %d agents, want 0", n)
	}
	sb := startSandbox(t, rt, rootfs, "after-close")
	if name := cgroupName(sb.cg); name != "after-close" {
		t.Errorf("Start() after Close used cgroup %s, want a fresh agent's (after-close)", name)
	}
}

// TestWarmPoolDeadAgent: a warm agent that died while idle is discarded and
// Start falls back to a fresh agent; the pool refills.
func TestWarmPoolDeadAgent(t *testing.T) {
	requiresProcessTier(t)
	rootfs := sandboxtest.BaseRootFS(t)
	rt := newWarmRuntime(t, 1)
	dead := idleAgents(rt)[0]
	if err := dead.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if !pollUntil(10*time.Second, func() bool { return !dead.alive() }) {
		t.Fatal("killed warm agent still alive")
	}
	sb := startSandbox(t, rt, rootfs, "fallback")
	if sb.proc == dead || cgroupName(sb.cg) != "fallback" {
		t.Errorf("Start() used cgroup %s, want a fresh agent's (fallback)", cgroupName(sb.cg))
	}
	for _, d := range dead.cg.dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dead warm agent's cgroup %s = %v, want removed", d, err)
		}
	}
	waitIdle(t, rt, 1)
}

// BenchmarkStart times Start (to ready) with and without a warm pool, the
// pool refilled outside the timed part.
func BenchmarkStart(b *testing.B) {
	testenv.RequireRoot(b)
	rootfs := testenv.BaseRootfs(b)
	for _, warm := range []int{0, 1} {
		b.Run(fmt.Sprintf("WarmPool=%d", warm), func(b *testing.B) {
			rt := newWarmRuntime(b, warm)
			ws := b.TempDir()
			for i := 0; b.Loop(); i++ {
				sb, err := rt.Start(context.Background(), sandbox.Spec{
					ID: fmt.Sprintf("bench-%d", i), RootLayers: []string{rootfs}, WorkspaceHost: ws,
					MemoryBytes: 256 << 20, CPU: 1,
				})
				if err != nil {
					b.Fatalf("Start() = %v", err)
				}
				b.StopTimer()
				if err := sb.Destroy(context.Background()); err != nil {
					b.Fatalf("Destroy() = %v", err)
				}
				if warm > 0 {
					waitIdle(b, rt, warm)
				}
				b.StartTimer()
			}
		})
	}
}

// TestSweepPoolCgroups: New removes old empty pool cgroups left by a
// worker that died without Close, and leaves other cgroups alone.
func TestSweepPoolCgroups(t *testing.T) {
	requiresProcessTier(t)
	stale, err := newCgroup(DefaultCgroupRoot, poolCgroupPrefix+"stale"+randomSuffix(t))
	if err != nil {
		t.Fatal(err)
	}
	other, err := newCgroup(DefaultCgroupRoot, "not-a-pool"+randomSuffix(t))
	if err != nil {
		t.Fatal(err)
	}
	young, err := newCgroup(DefaultCgroupRoot, poolCgroupPrefix+"young"+randomSuffix(t))
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * staleAfter)
	for _, cg := range []*cgroup{stale, other, young} {
		if err := cg.create(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cg.remove(context.Background()) })
		for _, d := range cg.dirs() {
			if err := os.Chtimes(d, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, d := range young.dirs() {
		if err := os.Chtimes(d, time.Now(), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	newRuntime(t)
	for _, d := range stale.dirs() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after New, stale %s = %v, want removed", d, err)
		}
	}
	for _, d := range append(other.dirs(), young.dirs()...) {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("after New, %s = %v, want kept", d, err)
		}
	}
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	name, err := poolCgroupName()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(name, poolCgroupPrefix)
}
