package guest

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// helmrUpperSize bounds what WriteFile may add under a writable
// /opt/helmr (agent.Init.HelmrWritable): a deployment's task bundles.
const helmrUpperSize = 256 << 20

// writableHelmr is the writable /opt/helmr the agent holds
// (agent.Init.HelmrWritable), an O_PATH descriptor of the overlay that
// mountWritableHelmr mounted, or -1. The sandbox binds that overlay
// read-only at /opt/helmr; WriteFile writes through this descriptor,
// whose mount outlives the pivot (detached, it stays while held). An
// agent sets up one sandbox, once: Setup sets it before the agent serves.
var writableHelmr = -1

// mountWritableHelmr mounts an overlay of lower (the /opt/helmr source: a
// path, or "fd:N") with an upper layer on a tmpfs of its own at "helmr" in
// the scratch directory (the current one), keeps it open as
// writableHelmr, and returns its path to bind read-only into the root.
func mountWritableHelmr(lower string) (string, error) {
	if strings.HasPrefix(lower, "fd:") {
		if err := mkdirMount("tmpfs", "helmr-lower", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
			return "", err
		}
		if err := attach(lower, "helmr-lower"); err != nil {
			return "", fmt.Errorf("/opt/helmr: %w", err)
		}
		lower = "helmr-lower"
	}
	if !strings.HasPrefix(lower, "/") {
		lower = "/proc/self/cwd/" + lower
	}
	upper, err := mountUpper("helmr-upper", helmrUpperSize)
	if err != nil {
		return "", fmt.Errorf("/opt/helmr: %w", err)
	}
	if err := mkdirMount("overlay", "helmr", "overlay", unix.MS_NOSUID|unix.MS_NODEV, "lowerdir="+escapeOverlayPath(lower)+upper); err != nil {
		return "", fmt.Errorf("/opt/helmr: %w", err)
	}
	fd, err := unix.Open("helmr", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("/opt/helmr: %w", err)
	}
	writableHelmr = fd
	return "helmr", nil
}

// writeStart is where writeFile starts walking to the path whose
// components are parts: "/", or for a path under /opt/helmr the writable
// overlay behind it (writableHelmr), with the components left. The
// caller closes the descriptor.
func writeStart(parts []string) (int, []string, error) {
	if writableHelmr >= 0 && len(parts) > 2 && parts[0] == "opt" && parts[1] == "helmr" {
		fd, err := unix.Openat(writableHelmr, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		return fd, parts[2:], err
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	return fd, parts, err
}
