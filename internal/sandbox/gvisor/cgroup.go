package gvisor

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
)

// cgroupStats reads the OOM kills of the container's host memory cgroup,
// <root>/memory/<parent>/<id> on cgroup v1 (memory.oom_control, oom_kill)
// and <root>/<parent>/<id> on v2 (memory.events, oom_kill). The memory
// limit is the host cgroup's, so it covers the Sentry and the gofer too;
// an OOM kill there may end a task process or the sandbox itself.
//
// PidsLimitHit is always false: the sandbox's process limit is enforced
// inside the Sentry (RLIMIT_NPROC), which reports no count of refused
// forks to the host, and the host cgroup's limit is a backstop sized
// beyond the spec's.
type cgroupStats struct {
	v1, v2 string // memory cgroup directory of each layout; one exists
	acct   string // v1 cpuacct cgroup directory
}

func newCgroupStats(root, parent, id string) cgroupStats {
	return cgroupStats{
		v1:   filepath.Join(root, "memory", parent, id),
		v2:   filepath.Join(root, parent, id),
		acct: filepath.Join(root, "cpuacct", parent, id),
	}
}

func (c cgroupStats) stats() sandbox.Stats {
	n := readCounter(filepath.Join(c.v1, "memory.oom_control"), "oom_kill")
	if n < 0 {
		n = readCounter(filepath.Join(c.v2, "memory.events"), "oom_kill")
	}
	st := sandbox.Stats{OOMKilled: n > 0}
	// The host's account of the sandbox's CPU time (the Sentry's own
	// accounting, which the guest sees, counts throttled time as running).
	if b, err := os.ReadFile(filepath.Join(c.acct, "cpuacct.usage")); err == nil {
		if ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
			st.CPUTime = time.Duration(ns)
		}
	} else if us := readCounter(filepath.Join(c.v2, "cpu.stat"), "usage_usec"); us >= 0 {
		st.CPUTime = time.Duration(us) * time.Microsecond
	}
	return st
}

// readCounter returns key's value in a "key value" file, or -1.
func readCounter(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
