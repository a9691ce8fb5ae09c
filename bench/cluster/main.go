// Command cluster measures end-to-end throughput of trivial runs on the
// multi-host topology of scripts/cluster.sh (two control-plane replicas
// behind haproxy, PostgreSQL, blobs in SeaweedFS S3, the process tier,
// warm pool on): n runs of bench/runstart/project's "first" task
// submitted at once (by -c clients through the balancer) to a cluster
// with 1 worker, then to one with 3 workers, each on a fresh cluster in
// the same run. It prints runs/s of each (first submit to last finish,
// by the API's timestamps), the ratio 3/1 (the baseline is the 1-worker
// cluster), queue-to-start latency (createdAt to startedAt) p50/p99
// under that load, and where the machine's CPU went while it ran.
// Run as root after scripts/setup.sh: go run ./bench/cluster [-n 200]
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/testenv"
)

func main() {
	n := flag.Int("n", 200, "runs per cluster")
	c := flag.Int("c", 16, "concurrent clients submitting the runs")
	slots := flag.Int("slots", 4, "slots per worker (HELMR_SLOTS)")
	workers := flag.String("workers", "1,3", "worker counts to measure, the first is the baseline")
	flag.Parse()
	if err := run(*n, *c, *slots, strings.Split(*workers, ",")); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// result is one cluster's measurement.
type result struct {
	workers  string
	perSec   float64
	wall     time.Duration
	p50, p99 time.Duration
	cpu      cpuUse
}

func run(n, conc, slots int, counts []string) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (scripts/cluster.sh makes network namespaces)")
	}
	bin, err := testenv.BuildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	var results []result
	for _, w := range counts {
		r, err := measure(bin, w, n, conc, slots)
		if err != nil {
			return fmt.Errorf("%s workers: %w", w, err)
		}
		results = append(results, r)
	}
	fmt.Printf("cluster throughput: %d trivial runs (bench/runstart/project first) submitted by %d clients; 2 replicas, process tier, HELMR_WARM=1, %d slots per worker\n", n, conc, slots)
	base := results[0]
	for _, r := range results {
		fmt.Printf("  %s worker(s): %6.1f runs/s (%5.1f s)  ratio %.2fx vs %s  queue-to-start p50 %7.1f ms  p99 %7.1f ms\n",
			r.workers, r.perSec, r.wall.Seconds(), r.perSec/base.perSec, base.workers, ms(r.p50), ms(r.p99))
		fmt.Printf("      CPU over the window (cores of %d): %s\n", r.cpu.cores, r.cpu)
	}
	last := results[len(results)-1].cpu
	top := groups[0]
	for _, g := range groups {
		if last.group[g] > last.group[top] {
			top = g
		}
	}
	fmt.Printf("  note: every part shares this machine's %d cores, which were %.0f%% busy with %s worker(s); %s took the most\n",
		last.cores, 100*last.total/float64(last.cores), results[len(results)-1].workers, top)
	fmt.Printf("  (%.2f cores: a sandbox and a node process per run on the process tier). More workers add slots, not cores:\n", last.group[top])
	fmt.Println("  once the cores are busy, the ratio says how much the extra workers' contention costs, not how Helmr scales")
	fmt.Println("  across machines, where each worker brings its own cores.")
	return nil
}

// measure brings up a cluster with w workers, warms every worker up,
// submits n runs with conc clients, and waits for all of them.
func measure(bin, w string, n, conc, slots int) (result, error) {
	dir, err := os.MkdirTemp("/var/tmp", "helmr-bench-cluster-")
	if err != nil {
		return result{}, err
	}
	_ = os.Chmod(dir, 0o711)
	cdir := filepath.Join(dir, "c")
	env := append(os.Environ(), "HELMR_BIN="+filepath.Join(bin, "helmr"), "HELMR_CACHE_DIR="+testenv.CacheDir(),
		"HELMR_CLUSTER_DIR="+cdir, "HELMR_WARM=1", fmt.Sprintf("HELMR_SLOTS=%d", slots))
	fmt.Fprintf(os.Stderr, "cluster: up with %s worker(s) in %s\n", w, cdir)
	exports, err := script(env, "up", "--dir", cdir, "--workers", w, "--replicas", "2", "--runtime", "process")
	defer func() {
		if _, err := script(env, "down"); err != nil {
			fmt.Fprintln(os.Stderr, "cluster: down:", err)
		}
		_ = os.RemoveAll(dir)
	}()
	if err != nil {
		return result{}, err
	}
	url, key := exports["HELMR_URL"], exports["HELMR_API_KEY"]
	cli := exec.Command(filepath.Join(bin, "helmr"), "deploy", "bench/runstart/project")
	cli.Dir = testenv.RepoRoot()
	cli.Env = append(os.Environ(), "HELMR_URL="+url, "HELMR_API_KEY="+key, "HELMR_PROFILE="+filepath.Join(dir, "profile.json"), "HELMR_PROJECT=")
	if out, err := cli.CombinedOutput(); err != nil {
		return result{}, fmt.Errorf("deploy: %v\n%s", err, out)
	}
	api := client.New(url, key)
	ctx := context.Background()
	// Warm-up: enough runs at once that every worker leases some and
	// prepares the image (and S3 has taken its first writes).
	var wn int
	fmt.Sscan(w, &wn)
	if _, _, err := submitAndWait(ctx, api, 2*wn*slots, conc); err != nil {
		return result{}, fmt.Errorf("warm-up: %w", err)
	}
	pids, err := componentPIDs(env)
	if err != nil {
		return result{}, err
	}
	before := sampleCPU(pids)
	start := time.Now()
	done, last, err := submitAndWait(ctx, api, n, conc)
	if err != nil {
		return result{}, err
	}
	cpu := sampleCPU(pids).since(before, time.Since(start))
	var waits []time.Duration
	for _, r := range done {
		waits = append(waits, r.StartedAt.Sub(r.CreatedAt))
	}
	slices.Sort(waits)
	wall := last.Sub(start)
	return result{workers: w, perSec: float64(n) / wall.Seconds(), wall: wall,
		p50: waits[len(waits)/2], p99: waits[(len(waits)*99)/100], cpu: cpu}, nil
}

// submitAndWait triggers n runs with conc clients and polls the run list
// until each is terminal; every run must complete. It returns the runs
// and the latest finish.
func submitAndWait(ctx context.Context, api *client.Client, n, conc int) ([]runs.Run, time.Time, error) {
	ids := make(chan string, n)
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				r, _, err := api.TriggerRun(ctx, "bench", "dev", "first", []byte("null"), "")
				if err != nil {
					errs <- err
					return
				}
				ids <- r.ID
			}
		}()
	}
	wg.Wait()
	close(ids)
	select {
	case err := <-errs:
		return nil, time.Time{}, fmt.Errorf("trigger: %w", err)
	default:
	}
	want := map[string]bool{}
	for id := range ids {
		want[id] = true
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		got := map[string]runs.Run{}
		cursor := ""
		for {
			p, err := api.ListRuns(ctx, "bench", "dev", runs.Filter{TaskID: "first", Limit: 1000, Cursor: cursor})
			if err != nil {
				return nil, time.Time{}, err
			}
			for _, r := range p.Runs {
				if want[r.ID] && r.Status.Terminal() {
					got[r.ID] = r
				}
			}
			if cursor = p.NextCursor; cursor == "" {
				break
			}
		}
		if len(got) == len(want) {
			var out []runs.Run
			var last time.Time
			for _, r := range got {
				if r.Status != runs.StatusCompleted || r.StartedAt == nil || r.FinishedAt == nil {
					return nil, time.Time{}, fmt.Errorf("run %s ended %s: %+v", r.ID, r.Status, r.Error)
				}
				if r.FinishedAt.After(last) {
					last = *r.FinishedAt
				}
				out = append(out, r)
			}
			return out, last, nil
		}
		if time.Now().After(deadline) {
			return nil, time.Time{}, fmt.Errorf("%d of %d runs finished after 10 minutes", len(got), len(want))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// script runs scripts/cluster.sh and returns what it exported.
func script(env []string, args ...string) (map[string]string, error) {
	cmd := scriptCmd(env, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("cluster.sh %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "="); ok {
			exports[k] = strings.Trim(v, "'")
		}
	}
	return exports, nil
}

func scriptCmd(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "scripts", "cluster.sh"), args...)
	cmd.Env = env
	return cmd
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
