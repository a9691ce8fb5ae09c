// Command sandboxmem measures the host memory Helmr adds per running
// sandbox, with N runs holding their sandboxes at once, on each tier:
//
//   - process: the resident memory of each sandbox's guest agent plus the
//     growth of the helmr dev process (control plane, worker, the sandbox's
//     user-space network) per sandbox; baseline: the task's own node.
//   - gvisor: the growth of helmr dev per sandbox plus how much more memory
//     a Helmr sandbox's host cgroup holds (Sentry, gofer, agent, adapter and
//     task) than a bare `runsc run` of the same root filesystem running the
//     same node program; baseline: that bare sandbox.
//
// Target: at most 10 MiB per sandbox. Run as root after scripts/setup.sh:
// go run ./bench/sandboxmem [-tier process|gvisor|all]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/testenv"
)

func main() {
	n := flag.Int("n", 6, "sandboxes held at once")
	tier := flag.String("tier", "all", "process, gvisor or all")
	flag.Parse()
	for _, t := range []string{"process", "gvisor"} {
		if *tier != "all" && *tier != t {
			continue
		}
		if err := run(t, *n); err != nil {
			fmt.Fprintln(os.Stderr, "sandboxmem:", t+":", err)
			os.Exit(1)
		}
	}
}

func run(tier string, n int) error {
	root := testenv.RepoRoot()
	bin, err := testenv.BuildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	tmp, err := os.MkdirTemp("", "helmr-mem-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	env := append(os.Environ(), "HELMR_DATA_DIR="+filepath.Join(tmp, "data"), "HELMR_PROFILE="+filepath.Join(tmp, "p.json"),
		"HELMR_ADDR=127.0.0.1:0", "HELMR_PROJECT=", "HELMR_RUNTIME="+tier, "HELMR_WARM=0", fmt.Sprintf("HELMR_SLOTS=%d", n))
	dev, err := testenv.StartDev(bin, env)
	if err != nil {
		return err
	}
	defer dev.Stop()
	url := dev.URL
	deploy := exec.Command(filepath.Join(bin, "helmr"), "deploy", "bench/runstart/project")
	deploy.Env, deploy.Dir = append(env, "HELMR_URL="+url), root
	if o, err := deploy.CombinedOutput(); err != nil {
		return fmt.Errorf("deploy: %v\n%s", err, o)
	}
	c := client.New(url, dev.Token)
	ctx := context.Background()
	// Warm the worker up with one run, then take the idle baseline.
	if err := holdRuns(ctx, c, 1, 10); err != nil {
		return err
	}
	before, err := rss(dev.Cmd.Process.Pid)
	if err != nil {
		return err
	}
	ids, err := startHolds(ctx, c, n, 20000)
	if err != nil {
		return err
	}
	if tier == "gvisor" {
		defer func() {
			for _, id := range ids {
				_, _ = c.CancelRun(ctx, id)
			}
		}()
		return gvisorShare(ctx, c, dev.Cmd.Process.Pid, before, ids)
	}
	agents, nodes := sandboxRSS(dev.Cmd.Process.Pid)
	during, err := rss(dev.Cmd.Process.Pid)
	if err != nil {
		return err
	}
	for _, id := range ids {
		_, _ = c.CancelRun(ctx, id)
	}
	// Besides one agent per held sandbox there may be the tier's idle
	// pre-launched agent: its memory is counted, spread over the sandboxes.
	if len(agents) < n || len(nodes) != n {
		return fmt.Errorf("found %d agents and %d node processes for %d held sandboxes", len(agents), len(nodes), n)
	}
	agentAvg, nodeAvg := avg(agents)*float64(len(agents))/float64(n), avg(nodes)
	workerPer := float64(during-before) / float64(n)
	total := agentAvg + workerPer
	fmt.Printf("host memory per running sandbox, process tier, %d sandboxes held at once\n", n)
	fmt.Printf("  guest agent RSS            %6.2f MiB (%d agents, idle pre-launched ones included)\n", mib(agentAvg), len(agents))
	fmt.Printf("  helmr dev growth / sandbox %6.2f MiB\n", mib(workerPer))
	fmt.Printf("  Helmr's share              %6.2f MiB (target <= 10 MiB)\n", mib(total))
	fmt.Printf("  baseline: the task's node  %6.2f MiB RSS; ratio Helmr/node %.2f\n", mib(nodeAvg), total/nodeAvg)
	return nil
}

// startHolds triggers n hold runs and waits until each has logged.
func startHolds(ctx context.Context, c *client.Client, n, ms int) ([]string, error) {
	var ids []string
	for i := 0; i < n; i++ {
		r, _, err := c.TriggerRun(ctx, "bench", "dev", "hold", []byte(fmt.Sprintf(`{"ms":%d}`, ms)), "")
		if err != nil {
			return nil, err
		}
		ids = append(ids, r.ID)
	}
	deadline := time.Now().Add(time.Minute)
	for _, id := range ids {
		for {
			p, err := c.Events(ctx, id, 0)
			if err != nil {
				return nil, err
			}
			logged := false
			for _, ev := range p.Events {
				logged = logged || ev.Type == runs.EventLog
			}
			if logged {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("run %s never logged", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return ids, nil
}

func holdRuns(ctx context.Context, c *client.Client, n, ms int) error {
	ids, err := startHolds(ctx, c, n, ms)
	if err != nil {
		return err
	}
	for _, id := range ids {
		for {
			r, err := c.GetRun(ctx, id)
			if err != nil {
				return err
			}
			if r.Status.Terminal() {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// sandboxRSS returns the resident bytes of each sandbox agent (a child of
// the dev process) and of each node process under those agents.
func sandboxRSS(devPid int) (agents, nodes []int64) {
	ents, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	name := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		fields := strings.Fields(s[i+2:])
		ppid, _ := strconv.Atoi(fields[1])
		// The agent is started through a descriptor, so its comm is a
		// number: name processes by argv[0] instead.
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		argv0, _, _ := strings.Cut(string(cmd), "\x00")
		parent[pid], name[pid] = ppid, filepath.Base(argv0)
	}
	for pid, pp := range parent {
		if pp == devPid && strings.HasPrefix(name[pid], "helmr-agent") {
			if r, err := rss(pid); err == nil {
				agents = append(agents, r)
			}
		}
	}
	for pid, pp := range parent {
		if name[pid] == "node" && strings.HasPrefix(name[pp], "helmr-agent") {
			if r, err := rss(pid); err == nil {
				nodes = append(nodes, r)
			}
		}
	}
	return agents, nodes
}

// rss reads a process's resident set size in bytes.
func rss(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS")
}

func avg(v []int64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s int64
	for _, x := range v {
		s += x
	}
	return float64(s) / float64(len(v))
}

func mib(b float64) float64 { return b / (1 << 20) }
