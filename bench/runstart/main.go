// Command runstart measures run start latency: the median time from
// POST /v1/tasks/{id}/runs to the task's first log line arriving over SSE
// (helmr dev, process tier), against the median time to start the same node
// one-liner directly in the same root filesystem (chroot) and read its first
// line, measured in the same run. Helmr is measured in three modes: warm (a
// sandbox booted ahead, runs spaced apart), back-to-back (runs so close that
// each waits for the sandbox booting since the previous claim), and cold
// (HELMR_WARM=0). It also times `helmr deploy` of examples/hello. Run as root
// after scripts/setup.sh: go run ./bench/runstart
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/testenv"
)

func main() {
	n := flag.Int("n", 20, "runs per measurement")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "runstart:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	root := testenv.RepoRoot()
	rootfs := filepath.Join(testenv.CacheDir(), "bases", "bookworm-node22", "rootfs")
	if _, err := os.Stat(filepath.Join(rootfs, "usr/local/bin/node")); err != nil {
		return fmt.Errorf("base rootfs missing (run scripts/setup.sh): %w", err)
	}
	bin, err := testenv.BuildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	var deploys []time.Duration
	for _, tier := range tierBenches(rootfs) {
		if tier.skip != "" {
			fmt.Printf("%s tier: not measured: %s\n", tier.name, tier.skip)
			continue
		}
		bareStarts, err := sample(n+1, 0, tier.bare)
		if err != nil {
			return err
		}
		b := median(bareStarts[1:])
		fmt.Printf("run start, %s tier, n=%d per mode\n", tier.name, n)
		fmt.Printf("  bare:  %s -> first line  median %6.1f ms\n", tier.bareDesc, ms(b))
		for _, m := range modes {
			h, d, err := measureHelmr(bin, root, n, tier.name, m.warm, m.gap)
			if err != nil {
				return err
			}
			deploys = append(deploys, d...)
			fmt.Printf("  helmr: POST /v1/tasks/first/runs -> first log line over SSE, %s\n", m.name)
			fmt.Printf("         median %6.1f ms  ratio helmr/bare %.2fx (target <= %.2fx)\n", ms(h), float64(h)/float64(b), tier.target)
		}
	}
	fmt.Printf("helmr deploy examples/hello: median %.1f ms over %d deploys (target < 1000 ms)\n", ms(median(deploys)), len(deploys))
	return nil
}

var modes = []struct {
	name, warm string
	gap        time.Duration
}{
	{"warm (a booted sandbox is ready; runs 300 ms apart)", "1", 300 * time.Millisecond},
	{"back-to-back (each run claims the sandbox still booting)", "1", 0},
	{"cold (HELMR_WARM=0: every sandbox booted on demand)", "0", 0},
}

// measureHelmr starts helmr dev with HELMR_WARM=warm, times deploys of
// examples/hello, and returns the median run start over n runs spaced by gap
// (after one warm-up run).
func measureHelmr(bin, root string, n int, tier, warm string, gap time.Duration) (time.Duration, []time.Duration, error) {
	tmp, err := os.MkdirTemp("", "helmr-bench-")
	if err != nil {
		return 0, nil, err
	}
	defer os.RemoveAll(tmp)
	env := append(os.Environ(), "HELMR_DATA_DIR="+filepath.Join(tmp, "data"), "HELMR_PROFILE="+filepath.Join(tmp, "profile.json"),
		"HELMR_ADDR=127.0.0.1:0", "HELMR_PROJECT=", "HELMR_WARM="+warm, "HELMR_RUNTIME="+tier)
	dev, err := testenv.StartDev(bin, env)
	if err != nil {
		return 0, nil, err
	}
	defer dev.Stop()
	url := dev.URL
	env = append(env, "HELMR_URL="+url)
	deploys, err := timeDeploys(bin, env, root, 3)
	if err != nil {
		return 0, nil, err
	}
	if err := helmr(bin, env, root, "deploy", "bench/runstart/project"); err != nil {
		return 0, nil, err
	}
	c := client.New(url, dev.Token)
	starts, err := sample(n+1, gap, func() (time.Duration, error) { return helmrStart(c) })
	if err != nil {
		return 0, nil, err
	}
	return median(starts[1:]), deploys, nil
}

func helmr(bin string, env []string, dir string, args ...string) error {
	cmd := exec.Command(filepath.Join(bin, "helmr"), args...)
	cmd.Env, cmd.Dir = env, dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helmr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func timeDeploys(bin string, env []string, root string, n int) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := helmr(bin, env, root, "deploy", "examples/hello"); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// helmrStart triggers a run and waits for its first log event over SSE.
func helmrStart(c *client.Client) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	r, _, err := c.TriggerRun(ctx, "bench", "dev", "first", []byte("null"), "")
	if err != nil {
		return 0, err
	}
	var first time.Duration
	errFirst := errors.New("first line")
	err = c.Follow(ctx, r.ID, 0, func(ev runs.Event) error {
		if ev.Type == runs.EventLog && first == 0 {
			first = time.Since(start)
			return errFirst
		}
		return nil
	})
	if first == 0 {
		return 0, fmt.Errorf("run %s printed no line: %v", r.ID, err)
	}
	// Let the run finish so samples don't overlap.
	for {
		got, err := c.GetRun(ctx, r.ID)
		if err != nil {
			return 0, err
		}
		if got.Status.Terminal() {
			if got.Status != runs.StatusCompleted {
				return 0, fmt.Errorf("bench run %s ended %s: %+v", r.ID, got.Status, got.Error)
			}
			return first, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// bareStart runs the same one-liner in the same root filesystem directly.
func bareStart(rootfs string) (time.Duration, error) {
	start := time.Now()
	cmd := exec.Command("chroot", rootfs, "/usr/local/bin/node", "-e", `console.log("first line")`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	d := time.Since(start)
	_ = cmd.Wait()
	if err != nil || line != "first line\n" {
		return 0, fmt.Errorf("bare node printed %q: %v", line, err)
	}
	return d, nil
}

func sample(n int, gap time.Duration, f func() (time.Duration, error)) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		time.Sleep(gap)
		d, err := f()
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
