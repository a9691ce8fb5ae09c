package sandboxtest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
)

// testMemoryLimit: a process allocating past the limit is killed and the
// sandbox reports the OOM kill.
func testMemoryLimit(t *testing.T, rt sandbox.Runtime, rootfs string) {
	f := start(t, rt, rootfs, func(s *sandbox.Spec) { s.MemoryBytes = 256 << 20 })
	if f.SB.Stats().OOMKilled {
		t.Fatal("Stats().OOMKilled = true before anything ran")
	}
	r := f.Exec(t, "node", "-e", `const a = []; for (;;) a.push(Buffer.alloc(16 << 20, 1));`)
	if r.Err != nil || r.Status.Signal != "killed" {
		t.Errorf("Exec(allocate forever) = %+v, %v; want killed", r.Status, r.Err)
	}
	if !pollUntil(5*time.Second, func() bool { return f.SB.Stats().OOMKilled }) {
		t.Errorf("Stats().OOMKilled = false after the kill, want true")
	}
	f.OK(t, "true") // the sandbox survives
}

// testPidsLimit: a fork bomb hits the pids limit, the sandbox stays
// controllable once the bomb's processes end, and Destroy cleans up.
func testPidsLimit(t *testing.T, rt sandbox.Runtime, rootfs string, opts Options) {
	f := start(t, rt, rootfs, func(s *sandbox.Spec) { s.PidsLimit = 64 })
	bomb := `i=0; while [ $i -lt 400 ]; do sleep 3 </dev/null >/dev/null 2>&1 & i=$((i+1)); done; echo all-forked`
	r := f.Exec(t, "sh", "-c", bomb)
	if r.Err != nil || r.Status.Code == 0 || strings.Contains(r.Stdout, "all-forked") {
		t.Errorf("Exec(fork bomb) = %q, %+v, %v; want the shell to fail to fork", r.Stdout, r.Status, r.Err)
	}
	if hit := f.SB.Stats().PidsLimitHit; hit == opts.PidsLimitUnreported {
		t.Errorf("Stats().PidsLimitHit = %v after the fork bomb, want %v (PidsLimitUnreported %v)", hit, !hit, opts.PidsLimitUnreported)
	}
	ok := pollUntil(30*time.Second, func() bool {
		r := f.Exec(t, "true")
		return r.Err == nil && r.Status.Code == 0
	})
	if !ok {
		t.Fatalf("sandbox did not run `true` within 30s of the fork bomb")
	}
	destroyed := time.Now()
	if err := f.SB.Destroy(context.Background()); err != nil {
		t.Errorf("Destroy() after fork bomb = %v", err)
	}
	if d := time.Since(destroyed); d > 2*time.Second {
		t.Errorf("Destroy() took %v, want well under a second", d)
	}
}

// sleepMarker is an argument that identifies the suite's sleep on the host.
const sleepMarker = "987654.321"

// testDestroy: Destroy ends every process of the sandbox, quickly, and is
// idempotent; Exec afterwards fails.
func testDestroy(t *testing.T, rt sandbox.Runtime, rootfs string) {
	f := start(t, rt, rootfs, nil)
	f.OK(t, "sh", "-c", "sleep "+sleepMarker+" </dev/null >/dev/null 2>&1 &")
	visible := len(hostProcsWith(sleepMarker)) > 0
	if !visible {
		t.Logf("%s: sandbox processes are not host processes; checking Destroy only", rt.Name())
	}
	began := time.Now()
	if err := f.SB.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy() = %v", err)
	}
	if d := time.Since(began); d > time.Second {
		t.Errorf("Destroy() took %v, want under a second", d)
	}
	if pids := hostProcsWith(sleepMarker); len(pids) > 0 {
		t.Errorf("after Destroy, host processes %v still run the sandbox's sleep", pids)
	}
	if err := f.SB.Destroy(context.Background()); err != nil {
		t.Errorf("second Destroy() = %v, want nil", err)
	}
	r := f.Exec(t, "true")
	if r.Err == nil {
		t.Errorf("Exec after Destroy = %+v, nil; want an error", r.Status)
	}
}

// hostProcsWith lists host pids whose command line has arg.
func hostProcsWith(arg string) []string {
	var pids []string
	matches, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, m := range matches {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(b, []byte{0}) {
			if string(a) == arg {
				pids = append(pids, filepath.Base(filepath.Dir(m)))
			}
		}
	}
	return pids
}
