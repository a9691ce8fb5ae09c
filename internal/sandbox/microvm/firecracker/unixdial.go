package firecracker

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// maxSunPath is the longest path a unix socket address holds (sun_path,
// less its terminating NUL).
const maxSunPath = 107

// dialUnix connects to the unix socket at path. A path too long for a
// socket address (a jail's root is deep in the tier's state directory) is
// reached through its directory: opened O_PATH, then named as
// /proc/self/fd/N/<base>, which the kernel resolves like any path.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) <= maxSunPath {
		return d.DialContext(ctx, "unix", path)
	}
	dir, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", path, err)
	}
	defer unix.Close(dir)
	short := "/proc/self/fd/" + strconv.Itoa(dir) + "/" + filepath.Base(path)
	if len(short) > maxSunPath {
		return nil, fmt.Errorf("dial %s: socket name %q too long", path, filepath.Base(path))
	}
	return d.DialContext(ctx, "unix", short)
}
