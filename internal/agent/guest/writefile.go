package guest

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent"
)

// writeFile places a file or directory as m asks (see agent.WriteFile):
// every component is opened without following symlinks, missing parents
// are made root-owned 0755, and the result is checked against the reader
// it is meant for. Under a writable /opt/helmr (agent.Init.HelmrWritable)
// it writes into the overlay behind that read-only mount. The agent holds CAP_CHOWN, CAP_DAC_OVERRIDE and
// CAP_FOWNER for this; the processes it starts hold none.
func writeFile(m *agent.WriteFile) error {
	p := m.Path
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("%q is not a clean absolute path", p)
	}
	dir, parts, err := writeStart(strings.Split(p[1:], "/"))
	if err != nil {
		return err
	}
	defer func() { unix.Close(dir) }()
	for _, part := range parts[:len(parts)-1] {
		next, err := unix.Openat(dir, part, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(dir, part, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("create %s: %w", part, err)
			}
			next, err = unix.Openat(dir, part, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return fmt.Errorf("%s: %s is a symlink or not a directory", p, part)
		}
		if err != nil {
			return fmt.Errorf("%s: open %s: %w", p, part, err)
		}
		unix.Close(dir)
		dir = next
	}
	last := parts[len(parts)-1]
	if m.Dir {
		if err := unix.Mkdirat(dir, last, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create %s: %w", p, err)
		}
		fd, err := unix.Openat(dir, last, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		err = ownAndMode(fd, m)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	} else {
		if err := unix.Unlinkat(dir, last, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("replace %s: %w", p, err)
		}
		fd, err := unix.Openat(dir, last, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
		for data := m.Data; len(data) > 0; {
			n, err := unix.Write(fd, data)
			if err != nil {
				unix.Close(fd)
				return fmt.Errorf("write %s: %w", p, err)
			}
			data = data[n:]
		}
		err = ownAndMode(fd, m)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	if m.ReaderUID != nil {
		return checkReadable(p, *m.ReaderUID, m.ReaderGID, m.Dir)
	}
	return nil
}

func ownAndMode(fd int, m *agent.WriteFile) error {
	if err := unix.Fchown(fd, int(m.UID), int(m.GID)); err != nil {
		return fmt.Errorf("owner %d:%d: %w", m.UID, m.GID, err)
	}
	if err := unix.Fchmod(fd, m.Mode&0o7777); err != nil {
		return fmt.Errorf("mode %#o: %w", m.Mode, err)
	}
	return nil
}

// checkReadable reports whether uid:gid (no supplementary groups, no
// capabilities: what a task process has) can traverse to p and read it
// (and, for a directory, list and enter it).
func checkReadable(p string, uid, gid uint32, dir bool) error {
	cur := "/"
	parts := strings.Split(p[1:], "/")
	for i, part := range parts {
		cur = path.Join(cur, part)
		var st unix.Stat_t
		if err := unix.Lstat(cur, &st); err != nil {
			return err
		}
		want := uint32(1) // x on the way
		if i == len(parts)-1 {
			want = 4 // r on the file, r and x on a directory
			if dir {
				want = 5
			}
		}
		if !allowed(st, uid, gid, want) {
			what := "traverse " + cur
			if i == len(parts)-1 {
				what = "read " + cur
			}
			return fmt.Errorf("the run's user %d:%d cannot %s (mode %#o, owner %d:%d); Helmr does not loosen a secret's permissions: declare a mode or owner that lets it", uid, gid, what, st.Mode&0o7777, st.Uid, st.Gid)
		}
	}
	return nil
}

func allowed(st unix.Stat_t, uid, gid, want uint32) bool {
	bits := st.Mode & 0o7
	switch {
	case st.Uid == uid:
		bits = (st.Mode >> 6) & 0o7
	case st.Gid == gid:
		bits = (st.Mode >> 3) & 0o7
	}
	return bits&want == want
}
