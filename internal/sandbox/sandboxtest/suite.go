// Package sandboxtest is the runtime conformance suite: the contract every
// isolation tier must meet (workspace, devices, identity files, isolation of
// processes, filesystem and network, no capabilities, resource limits, a
// writable root bounded in size and discarded with the sandbox, exec,
// channel and destroy), for a tier that checkpoints
// (sandbox.Checkpointer) the checkpoint contract, and for one whose
// sandboxes hold shell sessions (sandbox.Shells) the shell contract. A
// tier's test calls Run
// with a constructor for its Runtime and the path of a base root
// filesystem with node.
package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
)

// Run runs the conformance suite. newRuntime is called once per sandbox the
// suite starts; rootfs is a base root filesystem with /usr/local/bin/node
// (see BaseRootFS). The suite needs to read files the sandbox writes into
// its workspace, so it runs as root for the process tier.
func Run(t *testing.T, newRuntime func(t *testing.T) sandbox.Runtime, rootfs string) {
	RunWithOptions(t, newRuntime, rootfs, Options{})
}

// Options are the documented ways a tier may differ from the reference
// (process tier) behaviour; the zero value is the reference. Each field
// replaces one check with the check that holds for such a tier, never
// drops it.
type Options struct {
	// GuestKernel: the sandbox's processes run on a kernel of their own
	// (gVisor's Sentry, a VM's), not on the host's, and /proc/self/uid_map
	// describes that kernel's ids. NotHostRoot then checks that a process
	// running in the sandbox is no host process at all.
	GuestKernel bool
	// RootCaps is the capability mask (CapPrm, CapEff and CapBnd) that a
	// process started as the sandbox's uid 0 holds; 0 in the reference.
	// CapInh and CapAmb must still be empty and NoNewPrivs set.
	RootCaps uint64
	// PidsLimitUnreported: the tier enforces the pids limit inside its
	// guest kernel, which does not tell the host that a fork was refused;
	// Stats().PidsLimitHit must then stay false rather than guess.
	PidsLimitUnreported bool
	// WorkspaceImage: the tier gives its guest the workspace as a block
	// device, so the host sees the sandbox's workspace writes only once
	// the sandbox is destroyed (a directory is copied in and out), and it
	// takes the worker's quota disk as an unmounted image
	// (Spec.WorkspaceImage). The workspace checks then read the host's
	// side after Destroy, and WorkspaceQuota hands the tier the image.
	WorkspaceImage bool
}

// RunWithOptions runs the conformance suite for a tier that differs from
// the reference as opts says.
func RunWithOptions(t *testing.T, newRuntime func(t *testing.T) sandbox.Runtime, rootfs string, opts Options) {
	t.Run("Basics", func(t *testing.T) { runBasics(t, start(t, newRuntime(t), rootfs, nil), opts) })
	t.Run("Isolation", func(t *testing.T) { runIsolation(t, newRuntime, rootfs, opts) })
	t.Run("MemoryLimit", func(t *testing.T) { testMemoryLimit(t, newRuntime(t), rootfs) })
	t.Run("CPULimit", func(t *testing.T) { testCPULimit(t, newRuntime(t), rootfs) })
	t.Run("PidsLimit", func(t *testing.T) { testPidsLimit(t, newRuntime(t), rootfs, opts) })
	t.Run("Destroy", func(t *testing.T) { testDestroy(t, newRuntime(t), rootfs) })
	t.Run("Abuse", func(t *testing.T) { testAbuse(t, newRuntime(t), rootfs) })
	t.Run("WorkspaceQuota", func(t *testing.T) { testWorkspaceQuota(t, newRuntime(t), rootfs, opts) })
	t.Run("WritableRoot", func(t *testing.T) { testWritableRoot(t, newRuntime, rootfs) })
	t.Run("WriteFile", func(t *testing.T) { testWriteFile(t, newRuntime(t), rootfs) })
	t.Run("Egress", func(t *testing.T) { testEgress(t, newRuntime, rootfs) })
	t.Run("Checkpoint", func(t *testing.T) { testCheckpoint(t, newRuntime, rootfs) })
	t.Run("Shells", func(t *testing.T) { testShells(t, newRuntime(t), rootfs) })
}

// fixture is a started sandbox and the host directories behind it.
type fixture struct {
	SB        sandbox.Sandbox
	Spec      sandbox.Spec
	Workspace string // host directory mounted at Spec.Workspace
	TopLayer  string // host directory stacked on the base rootfs

	afterDestroy []func() // checks of the host's side, once destroyed
}

// Defaults of the sandboxes the suite starts.
const (
	testUID   = 1000
	testDNS   = "192.0.2.53"
	helloJS   = "console.log('hello from /opt/helmr')\n"
	marker    = "layer-marker"
	execLimit = 60 * time.Second
)

// start starts a sandbox on rootfs plus a small top layer; mutate adjusts
// the spec first. The sandbox is destroyed when the test ends.
func start(t *testing.T, rt sandbox.Runtime, rootfs string, mutate func(*sandbox.Spec)) *fixture {
	t.Helper()
	f := &fixture{Workspace: t.TempDir(), TopLayer: t.TempDir()}
	helmr := t.TempDir()
	writeFile(t, filepath.Join(helmr, "hello.js"), helloJS)
	writeFile(t, filepath.Join(f.TopLayer, marker), "top layer\n")
	for _, d := range []string{helmr, f.TopLayer} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.Spec = sandbox.Spec{
		ID:            "t-" + randomHex(t),
		RootLayers:    []string{rootfs, f.TopLayer},
		WorkspaceHost: f.Workspace,
		Workspace:     "/workspace",
		HelmrHost:     helmr,
		DNS:           []string{testDNS},
		UID:           testUID,
		GID:           testUID,
		CPU:           1,
		MemoryBytes:   1 << 30,
		PidsLimit:     512,
	}
	if mutate != nil {
		mutate(&f.Spec)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := rt.Start(ctx, f.Spec)
	if err != nil {
		t.Fatalf("%s.Start(%s) = %v", rt.Name(), f.Spec.ID, err)
	}
	f.SB = sb
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("Destroy() = %v", err)
		}
		for _, check := range f.afterDestroy {
			check()
		}
	})
	return f
}

// result is what one Exec produced.
type result struct {
	Stdout, Stderr string
	Chunks         []string // stdout chunks as delivered
	Status         sandbox.ExitStatus
	Err            error
}

// Exec runs argv with a plain environment and collects its output.
func (f *fixture) Exec(t *testing.T, argv ...string) result {
	t.Helper()
	return f.ExecReq(t, sandbox.ExecRequest{Argv: argv})
}

// ExecReq runs req (Env defaulted, output collected) with a time limit.
func (f *fixture) ExecReq(t *testing.T, req sandbox.ExecRequest) result {
	t.Helper()
	if req.Env == nil {
		req.Env = []string{"PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin", "HOME=/tmp"}
	}
	var r result
	var out, errOut strings.Builder
	req.OnOutput = func(stream string, data []byte) {
		if stream == "stdout" {
			out.Write(data)
			r.Chunks = append(r.Chunks, string(data))
		} else {
			errOut.Write(data)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), execLimit)
	defer cancel()
	r.Status, r.Err = f.SB.Exec(ctx, req)
	r.Stdout, r.Stderr = out.String(), errOut.String()
	return r
}

// OK runs argv and fails the test unless it exits 0; it returns stdout.
func (f *fixture) OK(t *testing.T, argv ...string) string {
	t.Helper()
	r := f.Exec(t, argv...)
	if r.Err != nil || r.Status.Code != 0 {
		t.Fatalf("Exec(%q) = %+v, %v; stderr %q; want exit 0", argv, r.Status, r.Err, r.Stderr)
	}
	return r.Stdout
}

// Node runs a node script that must exit 0 and returns its stdout.
func (f *fixture) Node(t *testing.T, script string) string {
	t.Helper()
	return f.OK(t, "node", "-e", script)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// pollUntil calls cond until it is true or the deadline passes.
func pollUntil(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}
