// Command microvmboot measures the microVM tier's cold boot: the median
// time from Runtime.Start to the guest agent's ready (QEMU started, the
// kernel booted, helmr-agent as init set the sandbox up), and from Start
// to the first Exec's output, over n sandboxes on the base image, next to
// a bare QEMU boot of the same kernel to its init (the boot probe). The
// layer images are made (and cached) before the first sample. It prints
// the accelerator: TCG is emulation and not a security boundary. Run as
// root after scripts/install-microvm.sh: go run ./bench/microvmboot
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/microvm"
	"github.com/helmr/helmr/internal/sandbox/microvm/guestfmt"
	"github.com/helmr/helmr/internal/testenv"
)

func main() {
	n := flag.Int("n", 5, "boots per measurement")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "microvmboot:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	rootfs := filepath.Join(testenv.CacheDir(), "bases", "bookworm-node22", "rootfs")
	if _, err := os.Stat(filepath.Join(rootfs, "usr/local/bin/node")); err != nil {
		return fmt.Errorf("base rootfs missing (run scripts/setup.sh): %w", err)
	}
	k, err := guestfmt.FindKernel(testenv.CacheDir())
	if err != nil {
		return err
	}
	bin, err := testenv.BuildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	state, err := os.MkdirTemp("", "helmr-microvmboot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	ctx := context.Background()
	rt, err := microvm.New(ctx, microvm.Config{
		Kernel: k, AgentPath: filepath.Join(bin, "helmr-agent"), StateDir: state,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	fmt.Printf("accelerator: %s%s\n", rt.Accel(), map[bool]string{true: " (emulation: NOT a security boundary)"}[rt.Accel() == microvm.AccelTCG])
	var ready, firstExec []time.Duration
	for i := 0; i <= n; i++ { // sample 0 makes the layer images: not counted
		ws, err := os.MkdirTemp("", "helmr-microvmboot-ws-")
		if err != nil {
			return err
		}
		spec := sandbox.Spec{ID: fmt.Sprintf("boot-%d", i), RootLayers: []string{rootfs}, WorkspaceHost: ws,
			UID: 1000, GID: 1000, CPU: 1, MemoryBytes: 512 << 20}
		t0 := time.Now()
		sb, err := rt.Start(ctx, spec)
		if err != nil {
			return err
		}
		t1 := time.Now()
		_, err = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/true"}})
		t2 := time.Now()
		derr := sb.Destroy(ctx)
		os.RemoveAll(ws)
		if err != nil {
			return err
		}
		if derr != nil {
			return derr
		}
		if i > 0 {
			ready, firstExec = append(ready, t1.Sub(t0)), append(firstExec, t2.Sub(t0))
		}
	}
	bare, err := bareBoots(n, k, rt)
	if err != nil {
		return err
	}
	fmt.Printf("cold boot to agent ready: median %v over %d (%v)\n", median(ready), n, ready)
	fmt.Printf("cold boot to first exec done: median %v\n", median(firstExec))
	fmt.Printf("bare QEMU boot to init and power-off (probe): median %v\n", median(bare))
	return nil
}

// bareBoots times QEMU booting the kernel with the probe initramfs to the
// init's answer and power-off, under the same accelerator.
func bareBoots(n int, k guestfmt.Kernel, rt *microvm.Runtime) ([]time.Duration, error) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if ok, why := microvm.ProbeBoot(qemu, rt.Accel(), k.Bzimage, rt.Initramfs()); !ok {
			return nil, fmt.Errorf("bare boot: %s", why)
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
