// Command microvm measures the microVM tier's sandbox start and memory
// (issue 21's targets), each next to a baseline taken in the same run:
//
//   - start from a boot snapshot (the tier's default: Runtime.Start to the
//     first output of an Exec) against a bare QEMU restore of the same
//     snapshot (QEMU alone: process start to the VM running, no disks
//     made, no init or agent; Runtime.BareRestore) and against a cold
//     boot of the same guest (boot snapshots off); targets: at most 1.2x
//     the bare restore and at most 0.25x the cold boot;
//   - host memory per idle guest beyond its configured memory: QEMU's
//     proportional set size less what of it is the guest's RAM, plus the
//     worker's own heap per sandbox; target: at most 10 MiB.
//
// The sandboxes run the base image (bookworm with Node.js) with a
// workspace image of 1 GiB, as the worker hands them. It prints the
// accelerator: TCG is emulation and not a security boundary. Run as root
// after scripts/setup.sh: go run ./bench/microvm [-n 7] [-idle 4]
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/microvm"
	"github.com/helmr/helmr/internal/sandbox/microvm/guestfmt"
	"github.com/helmr/helmr/internal/testenv"
)

func main() {
	n := flag.Int("n", 7, "starts per measurement")
	idle := flag.Int("idle", 4, "idle guests for the memory measurement")
	flag.Parse()
	if err := run(*n, *idle); err != nil {
		fmt.Fprintln(os.Stderr, "microvm:", err)
		os.Exit(1)
	}
}

type bench struct {
	ctx    context.Context
	rootfs string
	tmp    string
	seq    int
}

func run(n, idle int) error {
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
	tmp, err := os.MkdirTemp("", "helmr-bench-microvm-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	b := &bench{ctx: context.Background(), rootfs: rootfs, tmp: tmp}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	layers := filepath.Join(tmp, "layers-shared")
	newRT := func(name string, noSnapshots bool) (*microvm.Runtime, error) {
		state := filepath.Join(tmp, name)
		// Both runtimes share the layer images: neither pays for them.
		if err := os.MkdirAll(state, 0o700); err != nil {
			return nil, err
		}
		if err := os.Symlink(layers, filepath.Join(state, "layers")); err != nil {
			return nil, err
		}
		return microvm.New(b.ctx, microvm.Config{Kernel: k, AgentPath: filepath.Join(bin, "helmr-agent"),
			StateDir: state, NoBootSnapshots: noSnapshots, Logger: log})
	}
	if err := os.MkdirAll(layers, 0o700); err != nil {
		return err
	}
	snapRT, err := newRT("snapshots", false)
	if err != nil {
		return err
	}
	coldRT, err := newRT("cold", true)
	if err != nil {
		return err
	}
	accel := snapRT.Accel()
	if accel == microvm.AccelTCG {
		accel += " (emulation: NOT a security boundary; KVM does not boot a stock kernel here)"
	}
	fmt.Printf("accelerator: %s, guests of 512 MiB and 1 vCPU on the base image\n", accel)
	// Warm-up: the layer image, and the boot snapshot of this shape.
	if _, err := b.startExec(snapRT, true); err != nil {
		return err
	}
	var cold, snap, bare []time.Duration
	for i := 0; i < n; i++ {
		d, err := b.startExec(coldRT, true)
		if err != nil {
			return err
		}
		cold = append(cold, d)
		sb, d, err := b.startKeep(snapRT)
		if err != nil {
			return err
		}
		snap = append(snap, d)
		// The sandbox is gone first: the bare restore runs alone too.
		if err := sb.Destroy(b.ctx); err != nil {
			return err
		}
		bd, err := snapRT.BareRestore(b.ctx, sb)
		if err != nil {
			return err
		}
		bare = append(bare, bd)
	}
	fmt.Printf("\nsandbox start -> first output of an exec, n=%d\n", n)
	fmt.Printf("  helmr, from the boot snapshot: median %v  (%v)\n", median(snap), snap)
	fmt.Printf("  bare QEMU restore of the same snapshot to running: median %v  (%v)\n", median(bare), bare)
	fmt.Printf("  helmr, cold boot (boot snapshots off): median %v  (%v)\n", median(cold), cold)
	ratio("snapshot start / bare QEMU restore", median(snap), median(bare), 1.2)
	ratio("snapshot start / cold boot", median(snap), median(cold), 0.25)
	return b.memory(snapRT, idle)
}

// spec is a sandbox of the base image with a fresh 1 GiB workspace image.
func (b *bench) spec() (sandbox.Spec, error) {
	b.seq++
	img := filepath.Join(b.tmp, fmt.Sprintf("ws-%d.img", b.seq))
	helmr := filepath.Join(b.tmp, fmt.Sprintf("helmr-%d", b.seq))
	if err := os.MkdirAll(filepath.Join(helmr, "runtime"), 0o755); err != nil {
		return sandbox.Spec{}, err
	}
	if err := os.WriteFile(filepath.Join(helmr, "runtime", "adapter.mjs"), []byte("// adapter\n"), 0o644); err != nil {
		return sandbox.Spec{}, err
	}
	empty := filepath.Join(b.tmp, "empty")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		return sandbox.Spec{}, err
	}
	if err := guestfmt.DirImage(img, empty, 1<<30, nil); err != nil {
		return sandbox.Spec{}, err
	}
	return sandbox.Spec{ID: fmt.Sprintf("bench-%d", b.seq), RootLayers: []string{b.rootfs}, WorkspaceImage: img,
		HelmrHost: helmr, Workspace: "/workspace", UID: 1000, GID: 1000, CPU: 1, MemoryBytes: 512 << 20,
		Hostname: "helmr-sandbox"}, nil
}

// startKeep starts a sandbox and times Start to the first output of
// `echo ready`; the sandbox stays up.
func (b *bench) startKeep(rt *microvm.Runtime) (sandbox.Sandbox, time.Duration, error) {
	spec, err := b.spec()
	if err != nil {
		return nil, 0, err
	}
	t0 := time.Now()
	sb, err := rt.Start(b.ctx, spec)
	if err != nil {
		return nil, 0, err
	}
	var first time.Duration
	st, err := sb.Exec(b.ctx, sandbox.ExecRequest{Argv: []string{"echo", "ready"},
		OnOutput: func(string, []byte) {
			if first == 0 {
				first = time.Since(t0)
			}
		}})
	if err == nil && (st.Code != 0 || first == 0) {
		err = fmt.Errorf("echo ready: exit %d, output %v", st.Code, first != 0)
	}
	if err != nil {
		sb.Destroy(b.ctx)
		return nil, 0, err
	}
	return sb, first, nil
}

func (b *bench) startExec(rt *microvm.Runtime, destroy bool) (time.Duration, error) {
	sb, d, err := b.startKeep(rt)
	if err == nil && destroy {
		err = sb.Destroy(b.ctx)
	}
	return d, err
}

// memory starts idle guests from the snapshot, lets them settle and
// reports, per guest, QEMU's PSS beyond the guest's RAM and the worker's
// heap.
func (b *bench) memory(rt *microvm.Runtime, idle int) error {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var boxes []sandbox.Sandbox
	defer func() {
		for _, sb := range boxes {
			sb.Destroy(b.ctx)
		}
	}()
	for range idle {
		sb, _, err := b.startKeep(rt)
		if err != nil {
			return err
		}
		boxes = append(boxes, sb)
	}
	time.Sleep(3 * time.Second) // idle: let what the start left settle
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	heap := (int64(after.HeapInuse) - int64(before.HeapInuse)) / int64(idle)
	fmt.Printf("\nhost memory per idle guest of 512 MiB, %d guests\n", idle)
	var worst int64
	for _, sb := range boxes {
		pid := sb.(*microvm.Sandbox).Pid()
		total, guestRAM, err := pss(pid, 512+96)
		if err != nil {
			return err
		}
		over := total - guestRAM + max(heap, 0)
		worst = max(worst, over)
		fmt.Printf("  qemu %d: PSS %.1f MiB, of it guest RAM %.1f MiB; beyond it %.1f MiB (worker heap %.1f MiB)\n",
			pid, mib(total), mib(guestRAM), mib(over), mib(max(heap, 0)))
	}
	met := "MET"
	if mib(worst) > 10 {
		met = "MISSED"
	}
	fmt.Printf("  worst: %.1f MiB beyond the configured memory (target <= 10 MiB): %s\n", mib(worst), met)
	return nil
}

// pss sums the proportional set size of process pid, and of its mapping
// of the guest's RAM (the anonymous mapping of memMiB MiB, give or take
// QEMU's alignment).
func pss(pid, memMiB int) (total, guestRAM int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var inRAM bool
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			var lo, hi uint64
			fmt.Sscanf(fields[0], "%x-%x", &lo, &hi)
			size := int64(hi-lo) >> 20
			inRAM = len(fields) == 5 && size >= int64(memMiB) && size <= int64(memMiB)+4
			continue
		}
		if len(fields) == 3 && fields[0] == "Pss:" {
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			total += kb << 10
			if inRAM {
				guestRAM += kb << 10
			}
		}
	}
	return total, guestRAM, sc.Err()
}

func ratio(what string, got, base time.Duration, target float64) {
	r := float64(got) / float64(base)
	met := "MET"
	if r > target {
		met = "MISSED"
	}
	fmt.Printf("  ratio %s: %.2fx (target <= %.2fx): %s\n", what, r, target, met)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
