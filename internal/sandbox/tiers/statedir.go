package tiers

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Modes of the state directories: searchable ones let the sandboxes'
// unprivileged host uids walk to their state by path without listing
// anything; private ones are for tiers whose helpers run as root.
const (
	searchableMode fs.FileMode = 0o711
	privateMode    fs.FileMode = 0o700
)

// stateDir makes root/sub[0]/sub[1]/... ready as a tier's state directory
// and returns its path. Missing levels are created: root 0711 (it holds
// only the tiers' directories), the levels below it 0711 for a searchable
// tier and 0700 otherwise; missing parents of root 0711. A level that
// exists must be a directory owned by this process's uid that nobody else
// can write (root may be a symbolic link to one, the levels below may
// not). A searchable tier adds o+x to a level that lacks it, such as a
// root made 0700 by an older Helmr, and nothing else, and logs it; the
// parents of root are not changed (the process tier checks that they are
// searchable and says which is not).
func stateDir(h Host, root string, sub []string, searchable bool) (string, error) {
	if !filepath.IsAbs(root) {
		return "", fmt.Errorf("state root %q must be an absolute path", root)
	}
	dir := filepath.Clean(root)
	if err := os.MkdirAll(filepath.Dir(dir), searchableMode); err != nil {
		return "", fmt.Errorf("state root: %w", err)
	}
	if err := ensureDir(h, dir, searchableMode, searchable, true); err != nil {
		return "", err
	}
	mode := privateMode
	if searchable {
		mode = searchableMode
	}
	for _, s := range sub {
		if s == "" || s == "." || s == ".." || s != filepath.Base(s) {
			return "", fmt.Errorf("state dir: bad name %q", s)
		}
		dir = filepath.Join(dir, s)
		if err := ensureDir(h, dir, mode, searchable, false); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// ensureDir creates dir with mode, or checks (and for a searchable tier
// repairs) the directory that is there; follow lets dir be a symbolic
// link to a directory.
func ensureDir(h Host, dir string, mode fs.FileMode, searchable, follow bool) error {
	err := os.Mkdir(dir, mode)
	if err == nil {
		return os.Chmod(dir, mode) // whatever the umask took away
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("state dir: %w", err)
	}
	stat := os.Lstat
	if follow {
		stat = os.Stat
	}
	fi, err := stat(dir)
	if err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	switch st, _ := fi.Sys().(*syscall.Stat_t); {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("state dir %s is a symbolic link", dir)
	case !fi.IsDir():
		return fmt.Errorf("state dir %s is not a directory", dir)
	case st == nil || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("state dir %s is not owned by this process's uid %d", dir, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("state dir %s (mode %04o) is writable by others than its owner", dir, fi.Mode().Perm())
	case searchable && fi.Mode().Perm()&0o001 == 0:
		keep := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		if err := os.Chmod(dir, keep|0o001); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		h.logger().Warn("state dir was not searchable by others: added o+x (the process tier's sandboxes reach their state by path)",
			"path", dir, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()), "now", fmt.Sprintf("%04o", (keep|0o001).Perm()))
	}
	return nil
}
