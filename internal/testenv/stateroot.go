package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// StateRoot returns a fresh state root for Helmr's isolation tiers
// (HELMR_STATE_DIR) that nothing has made yet: the tiers create it as on a
// host where Helmr never ran, and no test shares the machine's /run/helmr.
// Its parent is searchable by others (the process tier's sandboxes walk to
// their state by path) and its path is short (runsc's socket paths must
// fit in a sockaddr_un). When tb ends, whatever is mounted below it is
// detached and it is removed.
func StateRoot(tb testing.TB) string {
	tb.Helper()
	parent, err := os.MkdirTemp("", "hs-")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(parent, 0o711); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ms := MountsUnder(parent)
		for i := len(ms) - 1; i >= 0; i-- {
			_ = unix.Unmount(ms[i], unix.MNT_DETACH)
		}
		if err := os.RemoveAll(parent); err != nil {
			tb.Errorf("remove state root: %v", err)
		}
	})
	return filepath.Join(parent, "run")
}

// MountsUnder lists the mount points below dir, in the order they were
// mounted.
func MountsUnder(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}
