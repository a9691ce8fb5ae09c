// Command exec measures a workspace's direct operation (issue 7): the
// round trip of POST /v1/workspaces/{id}/exec running `true` in a warm
// workspace (helmr dev, its in-process worker, the workspace's sandbox for
// operations kept up between them), against a bare exec of `true` into
// that same sandbox, measured in the same run, interleaved with Helmr's:
//
//   - gvisor tier: `runsc exec` into the operations sandbox's container,
//     with the runsc flags of the gvisor tier (--root of the worker's
//     instance, --platform systrap, --overlay2 none). Target: Helmr's
//     median within 1.2x of it.
//   - process tier: `nsenter -t PID -a -r -w true` into the namespaces of
//     the operations sandbox's agent (PID 1 of its pid namespace). Target:
//     Helmr's median under 5 ms.
//
// The first exec starts the workspace's sandbox; a few warm-ups follow,
// not counted. Run as root after scripts/setup.sh:
//
//	go run ./bench/exec [-n 50] [-warmup 5] [-tier gvisor,process]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/testenv"
)

// Targets of issue 7.
const (
	gvisorRatio   = 1.2
	processMedian = 5 * time.Millisecond
)

func main() {
	n := flag.Int("n", 50, "measured execs per side and tier")
	warmup := flag.Int("warmup", 5, "execs per side before measuring, not counted")
	tiers := flag.String("tier", "gvisor,process", "tiers to measure, comma-separated")
	flag.Parse()
	if err := run(*n, *warmup, strings.Split(*tiers, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "exec:", err)
		os.Exit(1)
	}
}

// result is one tier's figures.
type result struct {
	tier        string
	helmr, bare []time.Duration
	bareDesc    string
}

func run(n, warmup int, tiers []string) error {
	if n < 1 || warmup < 0 {
		return fmt.Errorf("-n must be at least 1 and -warmup at least 0")
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root: helmr dev's sandboxes need it, and so do runsc exec and nsenter")
	}
	rootfs := filepath.Join(testenv.CacheDir(), "bases", "bookworm-node22", "rootfs")
	if _, err := os.Stat(filepath.Join(rootfs, "usr/local/bin/node")); err != nil {
		return fmt.Errorf("base rootfs missing (run scripts/setup.sh): %w", err)
	}
	bin, err := testenv.BuildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	var results []result
	for _, tier := range tiers {
		var r result
		switch tier {
		case "gvisor":
			r, err = measureGvisor(bin, n, warmup)
		case "process":
			r, err = measureProcess(bin, n, warmup)
		default:
			return fmt.Errorf("unknown tier %q: gvisor or process", tier)
		}
		if err != nil {
			return fmt.Errorf("%s tier: %w", tier, err)
		}
		results = append(results, r)
	}
	report(results, n, warmup)
	return nil
}

// report prints one table of every tier's figures and their targets.
func report(results []result, n, warmup int) {
	fmt.Printf("\nworkspace exec of `true` in a warm workspace, n=%d per side (after %d warm-ups; Helmr and bare interleaved)\n", n, warmup)
	fmt.Printf("  %-8s %-58s %9s %9s\n", "tier", "what", "median", "p90")
	for _, r := range results {
		fmt.Printf("  %-8s %-58s %9s %9s\n", r.tier, "helmr: POST /v1/workspaces/{id}/exec, round trip", msf(median(r.helmr)), msf(p90(r.helmr)))
		fmt.Printf("  %-8s %-58s %9s %9s\n", "", "bare:  "+r.bareDesc, msf(median(r.bare)), msf(p90(r.bare)))
		ratio := float64(median(r.helmr)) / float64(median(r.bare))
		ratio90 := float64(p90(r.helmr)) / float64(p90(r.bare))
		var target string
		var met bool
		switch r.tier {
		case "gvisor":
			met = ratio <= gvisorRatio
			target = fmt.Sprintf("median ratio <= %.1fx", gvisorRatio)
		case "process":
			met = median(r.helmr) < processMedian
			target = fmt.Sprintf("helmr median < %s", processMedian)
		}
		verdict := "MET"
		if !met {
			verdict = "MISSED"
		}
		fmt.Printf("  %-8s ratio helmr/bare: median %.2fx, p90 %.2fx; target %s: %s\n", "", ratio, ratio90, target, verdict)
	}
}

func median(d []time.Duration) time.Duration { return quantile(d, 0.5) }
func p90(d []time.Duration) time.Duration    { return quantile(d, 0.9) }

// quantile is the nearest-rank q-quantile of d.
func quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func msf(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}
