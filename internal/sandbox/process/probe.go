package process

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Probe reports why the process tier cannot run on this host, or nil when
// it can: it needs root (id-mapped user namespaces and cgroup limits), user
// namespaces, overlayfs, idmapped mounts (mount_setattr, for the image
// layers under a writable root: see mounts), and memory, pids and cpu
// cgroup controllers.
func Probe(cgroupRoot string) error {
	if cgroupRoot == "" {
		cgroupRoot = DefaultCgroupRoot
	}
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("needs root (id-mapped user namespaces, cgroup limits)"))
	}
	if data, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil {
		if n, _ := strconv.Atoi(strings.TrimSpace(string(data))); n == 0 {
			errs = append(errs, errors.New("user namespaces are disabled (user.max_user_namespaces = 0)"))
		}
	}
	if data, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(data), "\toverlay\n") {
		errs = append(errs, errors.New("the kernel has no overlay filesystem"))
	}
	// An empty path on no descriptor: EBADF where the call exists.
	if err := unix.MountSetattr(-1, "", unix.AT_EMPTY_PATH, &unix.MountAttr{}); errors.Is(err, unix.ENOSYS) {
		errs = append(errs, errors.New("the kernel has no idmapped mounts (mount_setattr, Linux 5.12 and later)"))
	}
	if missing := missingControllers(cgroupRoot); len(missing) > 0 {
		errs = append(errs, fmt.Errorf("no cgroup controller for %s under %s", strings.Join(missing, ", "), cgroupRoot))
	}
	return errors.Join(errs...)
}

// missingControllers lists which of memory, pids and cpu neither a v1
// hierarchy nor the v2 root offers.
func missingControllers(root string) []string {
	v2, _ := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	have := map[string]bool{}
	for _, c := range strings.Fields(string(v2)) {
		have[c] = true
	}
	var missing []string
	for _, c := range []string{"memory", "pids", "cpu"} {
		if have[c] {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, c, "cgroup.procs")); err != nil {
			missing = append(missing, c)
		}
	}
	return missing
}
