package microvm

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/sandbox/microvm/guestfmt"
)

// workspace is a sandbox's workspace disk made from its host directory.
//
// The worker keeps a workspace as an ext4 image loop-mounted on the host
// (package disk) and gives tiers the mounted directory; a VM needs the
// image as a block device, which must not be mounted on the host at the
// same time. Until the worker hands the tier the image itself (the plug-in
// point: a spec field naming the unmounted image, attached read-write in
// place of this copy), the tier copies the directory into an image of its
// own at Start and the image's tree back into the directory at Destroy.
type workspace struct {
	host  string // spec.WorkspaceHost
	image string
}

// newWorkspace gives the host directory to the sandbox's user and copies
// it into a new image at img.
func newWorkspace(spec sandbox.Spec, img string, minSize int64) (*workspace, error) {
	if err := sandbox.ChownTree(spec.WorkspaceHost, int(spec.UID), int(spec.GID)); err != nil {
		return nil, fmt.Errorf("workspace ownership: %w", err)
	}
	// A workspace on a file system of its own (the worker's quota disk)
	// keeps its size: the guest's disk is as large as the host's.
	if size, ok := ownFSSize(spec.WorkspaceHost); ok {
		minSize = size
	}
	owner := [2]int{int(spec.UID), int(spec.GID)}
	if err := guestfmt.DirImage(img, spec.WorkspaceHost, minSize, &owner); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	return &workspace{host: spec.WorkspaceHost, image: img}, nil
}

// copyBack replaces the host directory's contents with the image's tree
// (mounted read-only, nodev and nosuid, under dir), dropping setuid and
// setgid bits and special files: the guest writes what it likes into its
// disk, the host takes back plain files, directories and symlinks only.
func (w *workspace) copyBack(dir string) error {
	mnt := filepath.Join(dir, "workspace.mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return fmt.Errorf("workspace copy-back: %w", err)
	}
	d, err := disk.Mount(w.image, mnt, true)
	if err != nil {
		return fmt.Errorf("workspace copy-back: %w", err)
	}
	defer d.Close()
	ents, err := os.ReadDir(w.host)
	if err != nil {
		return fmt.Errorf("workspace copy-back: %w", err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(w.host, e.Name())); err != nil {
			return fmt.Errorf("workspace copy-back: %w", err)
		}
	}
	// lost+found is the image's, not the workspace's.
	_ = os.Remove(filepath.Join(mnt, "lost+found"))
	var specials []string
	err = filepath.WalkDir(mnt, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if t := e.Type(); t&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			specials = append(specials, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("workspace copy-back: %w", err)
	}
	args := []string{"-a", "--", mnt + "/.", w.host + "/"}
	if out, err := exec.Command("cp", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("workspace copy-back: cp: %v: %s", err, out)
	}
	for _, p := range specials {
		rel, _ := filepath.Rel(mnt, p)
		_ = os.Remove(filepath.Join(w.host, rel))
	}
	return filepath.WalkDir(w.host, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := e.Info()
		if err == nil && fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			return os.Chmod(p, fi.Mode().Perm())
		}
		return nil
	})
}

// ownFSSize returns the size of the file system mounted at dir, if dir is
// a mount point.
func ownFSSize(dir string) (int64, bool) {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil || st.Dev == parent.Dev {
		return 0, false
	}
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil {
		return 0, false
	}
	return int64(fs.Blocks) * fs.Bsize, true
}
