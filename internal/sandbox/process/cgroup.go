package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/sandbox"
)

// cfsPeriod is the CPU quota period and minQuota the kernel's smallest
// quota, in microseconds.
const (
	cfsPeriod = 100000
	minQuota  = 1000
)

// cgroup is one agent's cgroup: on v1 a directory per controller
// (<root>/<controller>/helmr/<name>), on v2 one directory
// (<root>/helmr/<name>). The name is the sandbox id for an agent started
// for its sandbox, or pool-<random hex> for a warm pool agent, which keeps
// it once claimed (see the package doc).
type cgroup struct {
	v2      bool
	memory  string
	pids    string
	cpu     string // empty on v1 when the cpu controller is not mounted
	created []string
}

// newCgroup picks the hierarchy: v2 when the unified root offers memory,
// pids and cpu, else v1 with memory and pids (and cpu where mounted) under
// root.
func newCgroup(root, name string) (*cgroup, error) {
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		have := strings.Fields(string(b))
		if contains(have, "memory") && contains(have, "pids") && contains(have, "cpu") {
			dir := filepath.Join(root, cgroupParent, name)
			return &cgroup{v2: true, memory: dir, pids: dir, cpu: dir}, nil
		}
	}
	cg := &cgroup{}
	for _, c := range []struct {
		name     string
		dir      *string
		required bool
	}{{"memory", &cg.memory, true}, {"pids", &cg.pids, true}, {"cpu", &cg.cpu, false}} {
		base := filepath.Join(root, c.name)
		if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
			if c.required {
				return nil, fmt.Errorf("%w: cgroup v1 controller %s not mounted at %s", sandbox.ErrGuestRuntime, c.name, base)
			}
			continue
		}
		*c.dir = filepath.Join(base, cgroupParent, name)
	}
	return cg, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// dirs lists the distinct cgroup directories.
func (cg *cgroup) dirs() []string {
	if cg.v2 {
		return []string{cg.memory}
	}
	out := []string{cg.memory, cg.pids}
	if cg.cpu != "" {
		out = append(out, cg.cpu)
	}
	return out
}

// create makes the directories, without limits (writeLimits).
func (cg *cgroup) create() error {
	if cg.v2 {
		if err := enableV2Controllers(filepath.Dir(filepath.Dir(cg.memory))); err != nil {
			return err
		}
	}
	for _, d := range cg.dirs() {
		if err := os.MkdirAll(filepath.Dir(d), 0o755); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		if cg.v2 {
			if err := enableV2Controllers(filepath.Dir(d)); err != nil {
				return err
			}
		}
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		cg.created = append(cg.created, d)
	}
	return nil
}

func enableV2Controllers(dir string) error {
	err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0)
	if err != nil {
		return fmt.Errorf("cgroup: enable controllers in %s: %w", dir, err)
	}
	return nil
}

// writeLimits writes spec's limits; a cgroup that holds the agent already
// takes them as well as an empty one.
func (cg *cgroup) writeLimits(spec sandbox.Spec) error {
	if spec.CPU > 0 && cg.cpu == "" {
		return fmt.Errorf("%w: a CPU limit needs the cgroup v1 cpu controller, which is not mounted", sandbox.ErrGuestRuntime)
	}
	var files [][2]string // path, value
	quota := strconv.FormatInt(max(int64(spec.CPU*cfsPeriod), minQuota), 10)
	pids := strconv.FormatInt(spec.PidsLimit, 10)
	mem := strconv.FormatInt(spec.MemoryBytes, 10)
	if cg.v2 {
		files = append(files, [2]string{"pids.max", pids})
		if spec.MemoryBytes > 0 {
			files = append(files, [2]string{"memory.max", mem}, [2]string{"memory.swap.max?", "0"})
		}
		if spec.CPU > 0 {
			files = append(files, [2]string{"cpu.max", quota + " " + strconv.Itoa(cfsPeriod)})
		}
	} else {
		files = append(files, [2]string{filepath.Join(cg.pids, "pids.max"), pids})
		if spec.MemoryBytes > 0 {
			files = append(files, [2]string{filepath.Join(cg.memory, "memory.limit_in_bytes"), mem},
				[2]string{filepath.Join(cg.memory, "memory.memsw.limit_in_bytes?"), mem})
		}
		if spec.CPU > 0 {
			files = append(files, [2]string{filepath.Join(cg.cpu, "cpu.cfs_period_us"), strconv.Itoa(cfsPeriod)},
				[2]string{filepath.Join(cg.cpu, "cpu.cfs_quota_us"), quota})
		}
	}
	for _, f := range files {
		path, optional := strings.CutSuffix(f[0], "?")
		if !filepath.IsAbs(path) {
			path = filepath.Join(cg.memory, path)
		}
		err := os.WriteFile(path, []byte(f[1]), 0)
		if err != nil && !(optional && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("cgroup limit: %w", err)
		}
	}
	return nil
}

// addProc moves pid into every directory.
func (cg *cgroup) addProc(pid int) error {
	for _, d := range cg.dirs() {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("cgroup: add agent: %w", err)
		}
	}
	return nil
}

// stats reads the OOM-kill and pids-limit counters.
func (cg *cgroup) stats() sandbox.Stats {
	var st sandbox.Stats
	if cg.v2 {
		st.OOMKilled = readCounter(filepath.Join(cg.memory, "memory.events"), "oom_kill") > 0
	} else if n := readCounter(filepath.Join(cg.memory, "memory.oom_control"), "oom_kill"); n >= 0 {
		st.OOMKilled = n > 0
	} else {
		st.OOMKilled = readCounter(filepath.Join(cg.memory, "memory.failcnt"), "") > 0
	}
	st.PidsLimitHit = readCounter(filepath.Join(cg.pids, "pids.events"), "max") > 0
	return st
}

// readCounter returns the value of the "key value" line (or, with key "",
// the file's single number); -1 if there is none.
func readCounter(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		var v string
		switch {
		case key == "" && len(fields) == 1:
			v = fields[0]
		case len(fields) == 2 && fields[0] == key:
			v = fields[1]
		default:
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n
		}
	}
	return -1
}

// remove deletes the directories, killing any process left in them, polling
// until they are gone or ctx ends.
func (cg *cgroup) remove(ctx context.Context) error {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for _, d := range cg.created {
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			killProcs(d)
			select {
			case <-tick.C:
			case <-ctx.Done():
				return fmt.Errorf("remove cgroup %s: %w (last: %w)", d, ctx.Err(), err)
			}
		}
	}
	cg.created = nil
	return nil
}

func killProcs(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}
