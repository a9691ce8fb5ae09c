package microvm

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// sweep removes what a previous worker with this state directory left:
// QEMU dies with the worker (Pdeathsig), but Firecracker does not (the
// jailer's change of uid clears the parent-death signal), so the
// processes in the jails' cgroups are killed first; then the mounts under
// the state directory (jails' bind mounts, network namespaces) are
// detached and the jails and sandbox directories removed.
func (r *Runtime) sweep() {
	jails, _ := os.ReadDir(r.cfg.jails())
	for _, exe := range jails {
		ids, _ := os.ReadDir(filepath.Join(r.cfg.jails(), exe.Name()))
		for _, id := range ids {
			dirs := killCgroup(r.cfg.CgroupRoot, r.cfg.CgroupParent, id.Name())
			if err := removeCgroupDirs(dirs); err != nil {
				r.log.Warn("remove stale firecracker cgroup", "jail", id.Name(), "err", err)
			}
		}
	}
	unmountUnder(r.cfg.StateDir)
	if err := os.RemoveAll(r.cfg.jails()); err != nil {
		r.log.Warn("remove stale jails", "err", err)
	}
	ents, err := os.ReadDir(r.cfg.sandboxes())
	if err != nil {
		return
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(r.cfg.sandboxes(), e.Name())); err != nil {
			r.log.Warn("remove stale sandbox", "sandbox_id", e.Name(), "err", err)
		}
	}
}

// killCgroup kills every process of the jail id's cgroup (v2: one
// directory; v1: one per controller the jailer uses) and returns the
// directories that exist.
func killCgroup(root, parent, id string) []string {
	var dirs []string
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		dirs = []string{filepath.Join(root, parent, id)}
	} else {
		for _, c := range []string{"memory", "cpu", "pids"} {
			dirs = append(dirs, filepath.Join(root, c, parent, id))
		}
	}
	var out []string
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if err != nil {
			continue
		}
		out = append(out, d)
		if os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0) == nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	return out
}

// unmountUnder detaches every mount whose mount point is below dir,
// deepest first.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	prefix := filepath.Clean(dir) + "/"
	var points []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if p := unescapeMountinfo(fields[4]); strings.HasPrefix(p, prefix) {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
