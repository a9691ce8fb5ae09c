package microvm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cgroup is the host cgroup a sandbox's QEMU runs in: on v2 one directory
// (<root>/<parent>/<id>), on v1 one per controller
// (<root>/<controller>/<parent>/<id>). Memory bounds the guest's RAM plus
// QEMU's own overhead, cpu the vCPUs' time, pids QEMU's threads.
type cgroup struct {
	dirs map[string]string // controller ("memory", "pids", "cpu") → directory
	v2   bool
}

// Overheads of QEMU itself beyond the guest's memory, and its thread cap.
const (
	qemuMemOverhead = 256 << 20
	qemuPids        = 256
	cfsPeriod       = 100000
)

// newCgroup makes the cgroup with limits for a guest of memBytes and cpus
// (0: no CPU quota). Controllers the host lacks are left out: "where
// possible" (see the package doc); Detail says which.
func newCgroup(root, parent, id string, memBytes int64, cpus float64) (*cgroup, error) {
	cg := &cgroup{dirs: map[string]string{}}
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		cg.v2 = true
		dir := filepath.Join(root, parent, id)
		for _, c := range strings.Fields(string(b)) {
			if c == "memory" || c == "pids" || c == "cpu" {
				cg.dirs[c] = dir
			}
		}
		if len(cg.dirs) > 0 {
			_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0)
			if err := os.MkdirAll(filepath.Join(root, parent), 0o755); err != nil {
				return nil, err
			}
			_ = os.WriteFile(filepath.Join(root, parent, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0)
		}
	} else {
		for _, c := range []string{"memory", "pids", "cpu"} {
			if _, err := os.Stat(filepath.Join(root, c, "cgroup.procs")); err == nil {
				cg.dirs[c] = filepath.Join(root, c, parent, id)
			}
		}
	}
	for _, d := range cg.dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	mem := strconv.FormatInt(memBytes+qemuMemOverhead, 10)
	writes := map[string][2]string{
		"memory": {"memory.limit_in_bytes", mem},
		"pids":   {"pids.max", strconv.Itoa(qemuPids)},
	}
	if cg.v2 {
		writes["memory"] = [2]string{"memory.max", mem}
	}
	if cpus > 0 {
		quota := strconv.FormatInt(int64(cpus*cfsPeriod), 10)
		if cg.v2 {
			writes["cpu"] = [2]string{"cpu.max", quota + " " + strconv.Itoa(cfsPeriod)}
		} else {
			writes["cpu"] = [2]string{"cpu.cfs_quota_us", quota}
		}
	}
	for c, w := range writes {
		d, ok := cg.dirs[c]
		if !ok {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, w[0]), []byte(w[1]), 0); err != nil {
			cg.remove()
			return nil, fmt.Errorf("cgroup: %s: %w", w[0], err)
		}
	}
	return cg, nil
}

// add moves pid (every thread of it) into the cgroup.
func (cg *cgroup) add(pid int) error {
	seen := map[string]bool{}
	for _, d := range cg.dirs {
		if seen[d] {
			continue
		}
		seen[d] = true
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("cgroup: add qemu: %w", err)
		}
	}
	return nil
}

// controllers names the controllers in use, for logs.
func (cg *cgroup) controllers() string {
	var out []string
	for _, c := range []string{"memory", "cpu", "pids"} {
		if _, ok := cg.dirs[c]; ok {
			out = append(out, c)
		}
	}
	return strings.Join(out, ",")
}

// remove deletes the cgroup's directories once their processes are gone
// (a killed process leaves its cgroup a moment later).
func (cg *cgroup) remove() error {
	seen := map[string]bool{}
	var dirs []string
	for _, d := range cg.dirs {
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	return removeCgroupDirs(dirs)
}

// removeCgroupDirs deletes cgroup directories whose processes are gone or
// going.
func removeCgroupDirs(dirs []string) error {
	var errs []error
	for _, d := range dirs {
		var err error
		for deadline := time.Now().Add(2 * time.Second); ; {
			err = os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}
