package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc's CPU times (100
// on every Linux architecture Helmr runs on).
const clockTicks = 100

// groups are the cluster's parts the CPU is attributed to, in print order.
var groups = []string{"workers", "replicas", "postgres", "s3", "lb"}

// componentPIDs maps each group to its processes' pids, from cluster.sh
// status ("name pid up").
func componentPIDs(env []string) (map[int]string, error) {
	cmd := scriptCmd(env, "status")
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("cluster.sh status: %w", err)
	}
	pids := map[int]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "up" {
			return nil, fmt.Errorf("cluster.sh status: %q is not up", line)
		}
		pid, _ := strconv.Atoi(f[1])
		name, _, _ := strings.Cut(f[0], "-")
		switch name {
		case "worker":
			name = "workers"
		case "replica":
			name = "replicas"
		}
		pids[pid] = name
	}
	return pids, nil
}

// cpuSample is CPU time (in ticks) so far: per group (each group's
// processes and their descendants, with the children they reaped), and
// of the whole machine.
type cpuSample struct {
	group map[string]int64
	busy  int64
}

// sampleCPU reads /proc.
func sampleCPU(roots map[int]string) cpuSample {
	s := cpuSample{group: map[string]int64{}, busy: machineBusy()}
	type proc struct {
		ppid  int
		ticks int64
	}
	procs := map[int]proc{}
	ents, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, e := range ents {
		data, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		// The fields after the command's closing parenthesis: state is
		// the first; ppid the second, utime..cstime the 12th to 15th.
		i := strings.LastIndexByte(string(data), ')')
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 15 {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(e)))
		ppid, _ := strconv.Atoi(f[1])
		var t int64
		for _, v := range f[11:15] {
			n, _ := strconv.ParseInt(v, 10, 64)
			t += n
		}
		procs[pid] = proc{ppid, t}
	}
	for pid, p := range procs {
		for a, hops := pid, 0; a > 1 && hops < 64; a, hops = procs[a].ppid, hops+1 {
			if g, ok := roots[a]; ok {
				s.group[g] += p.ticks
				break
			}
		}
	}
	return s
}

// machineBusy is the machine's non-idle CPU time from /proc/stat.
func machineBusy() int64 {
	data, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	var busy int64
	for i, v := range f[1:] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i == 3 || i == 4 || i >= 7 { // idle, iowait; steal, guest (in user already)
			continue
		}
		busy += n
	}
	return busy
}

// cpuUse is the cores each group kept busy on average over a window.
type cpuUse struct {
	cores int
	group map[string]float64
	total float64
}

func (s cpuSample) since(before cpuSample, wall time.Duration) cpuUse {
	secs := wall.Seconds() * clockTicks
	u := cpuUse{cores: runtime.NumCPU(), group: map[string]float64{}, total: float64(s.busy-before.busy) / secs}
	for _, g := range groups {
		u.group[g] = float64(s.group[g]-before.group[g]) / secs
	}
	return u
}

func (u cpuUse) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "all %.2f =", u.total)
	rest := u.total
	for _, g := range groups {
		fmt.Fprintf(&b, " %s %.2f", g, u.group[g])
		rest -= u.group[g]
	}
	fmt.Fprintf(&b, " other %.2f (the bench's clients, other sessions)", rest)
	return b.String()
}
