package sandbox

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ChownTree gives the directory tree at root to uid:gid. It walks with
// openat and O_NOFOLLOW and never follows a symlink, so a tree whose
// entries change under it (a workspace another sandbox writes) cannot
// redirect it outside root. Entries already owned by uid:gid are skipped.
func ChownTree(root string, uid, gid int) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", root, err)
	}
	return chownDir(os.NewFile(uintptr(fd), root), uid, gid)
}

// chownDir chowns the open directory d and everything below it; it closes d.
func chownDir(d *os.File, uid, gid int) error {
	defer d.Close()
	fd := int(d.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", d.Name(), err)
	}
	if int(st.Uid) != uid || int(st.Gid) != gid {
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return fmt.Errorf("chown %s: %w", d.Name(), err)
		}
	}
	entries, err := d.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("read %s: %w", d.Name(), err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			cfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENOENT) {
				continue // replaced while we looked
			}
			if err != nil {
				return fmt.Errorf("open %s/%s: %w", d.Name(), name, err)
			}
			if err := chownDir(os.NewFile(uintptr(cfd), d.Name()+"/"+name), uid, gid); err != nil {
				return err
			}
			continue
		}
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		if int(st.Uid) == uid && int(st.Gid) == gid {
			continue
		}
		if err := unix.Fchownat(fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("chown %s/%s: %w", d.Name(), name, err)
		}
	}
	return nil
}
