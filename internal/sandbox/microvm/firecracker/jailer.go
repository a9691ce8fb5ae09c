package firecracker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Paths in a jail (relative to its root, as Firecracker sees them).
const (
	APISock   = "/api.sock"
	VsockSock = "/vsock.sock"
	// SnapshotDir holds a snapshot's files; Firecracker's uid owns it.
	SnapshotDir = "/snapshot"
)

// Jail is one Firecracker process as the jailer starts it. See the
// package doc for what is where.
type Jail struct {
	// ID names the VM: letters, digits and hyphens, at most 64 (the
	// jailer's rule). It names the jail's directory and cgroup.
	ID string
	// Jailer and Firecracker are the binaries (Install).
	Jailer, Firecracker string
	// UID and GID Firecracker runs as.
	UID, GID uint32
	// ChrootBase holds the jails (the jailer's --chroot-base-dir).
	ChrootBase string
	// CgroupVersion is 1 or 2; CgroupParent the cgroup, relative to the
	// hierarchy's root, the jailer makes the VM's cgroup ID in; Cgroups
	// are the values it writes there ("memory.max=1073741824").
	CgroupVersion int
	CgroupParent  string
	Cgroups       []string
	// Netns, if set, is the network namespace (a path of a handle, as
	// /var/run/netns/NAME) Firecracker joins.
	Netns string

	mounts []string // bind mounts Place made, host paths
}

var jailIDRE = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

// Validate checks what the jailer would refuse.
func (j *Jail) Validate() error {
	switch {
	case !jailIDRE.MatchString(j.ID):
		return fmt.Errorf("jail id %q: want 1 to 64 letters, digits or hyphens", j.ID)
	case !filepath.IsAbs(j.Jailer) || !filepath.IsAbs(j.Firecracker):
		return fmt.Errorf("jailer %q and firecracker %q must be absolute paths", j.Jailer, j.Firecracker)
	case !strings.Contains(filepath.Base(j.Firecracker), "firecracker"):
		return fmt.Errorf("firecracker binary %q: the jailer runs only a file whose name holds \"firecracker\"", j.Firecracker)
	case !filepath.IsAbs(j.ChrootBase):
		return fmt.Errorf("chroot base %q must be an absolute path", j.ChrootBase)
	case j.CgroupVersion != 1 && j.CgroupVersion != 2:
		return fmt.Errorf("cgroup version %d: want 1 or 2", j.CgroupVersion)
	case j.UID == 0 || j.GID == 0:
		return errors.New("firecracker must not run as root")
	}
	for _, c := range j.Cgroups {
		if k, v, ok := strings.Cut(c, "="); !ok || k == "" || v == "" || strings.ContainsAny(k, "/") {
			return fmt.Errorf("cgroup setting %q: want file=value", c)
		}
	}
	return nil
}

// Dir is the jail's directory on the host, which Remove deletes.
func (j *Jail) Dir() string {
	return filepath.Join(j.ChrootBase, filepath.Base(j.Firecracker), j.ID)
}

// Root is the jail's root on the host: Firecracker's "/".
func (j *Jail) Root() string { return filepath.Join(j.Dir(), "root") }

// HostPath is where the jail's path p (as Firecracker sees it) is on the
// host.
func (j *Jail) HostPath(p string) string { return filepath.Join(j.Root(), filepath.Clean("/"+p)) }

// Args are the jailer's arguments: its own, then, after "--",
// Firecracker's (its API socket in the jail).
func (j *Jail) Args() []string {
	args := []string{
		"--id", j.ID,
		"--exec-file", j.Firecracker,
		"--uid", strconv.FormatUint(uint64(j.UID), 10),
		"--gid", strconv.FormatUint(uint64(j.GID), 10),
		"--chroot-base-dir", j.ChrootBase,
		"--cgroup-version", strconv.Itoa(j.CgroupVersion),
	}
	if j.CgroupParent != "" {
		args = append(args, "--parent-cgroup", j.CgroupParent)
	}
	for _, c := range j.Cgroups {
		args = append(args, "--cgroup", c)
	}
	if j.Netns != "" {
		args = append(args, "--netns", j.Netns)
	}
	return append(args, "--", "--api-sock", APISock)
}

// Command is the jailer's command, with an empty environment (the jailer
// clears it anyway), killed with the caller (Pdeathsig) and in a session
// of its own. Its life is not ctx's: only the caller's kill ends it.
func (j *Jail) Command() *exec.Cmd {
	cmd := exec.Command(j.Jailer, j.Args()...)
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
	return cmd
}

// Prepare makes the jail's root (and SnapshotDir, owned by Firecracker's
// uid) before the jailer runs, so that files can be placed in it; the
// jailer leaves an existing directory as it is.
func (j *Jail) Prepare() error {
	if err := j.Validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(j.ChrootBase, 0o700); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	if err := os.MkdirAll(j.Root(), 0o755); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	snap := j.HostPath(SnapshotDir)
	if err := os.Mkdir(snap, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("jail: %w", err)
	}
	if err := os.Chown(snap, int(j.UID), int(j.GID)); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	return nil
}

// Place puts the host file src at the jail's path p: a hard link, or, when
// src is on another file system, a bind mount (read-only if readOnly) onto
// an empty file, which Remove undoes. A hard link shares src's inode, so
// src's owner and mode are what Firecracker's uid must be able to use:
// the caller sees to them.
func (j *Jail) Place(src, p string, readOnly bool) error {
	dst := j.HostPath(p)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("jail: place %s: %w", p, err)
	}
	err := os.Link(src, dst)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EXDEV) {
		return fmt.Errorf("jail: place %s: %w", p, err)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("jail: place %s: %w", p, err)
	}
	f.Close()
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("jail: bind %s at %s: %w", src, p, err)
	}
	j.mounts = append(j.mounts, dst)
	if readOnly {
		if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("jail: bind %s at %s read-only: %w", src, p, err)
		}
	}
	return nil
}

// Remove undoes Place's bind mounts and deletes the jail's directory
// (hard links go, their sources stay). Call it once Firecracker has
// exited.
func (j *Jail) Remove() error {
	var errs []error
	for _, m := range j.mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("jail: unmount %s: %w", m, err))
		}
	}
	if len(errs) > 0 {
		// A file still bound must not be removed through its mount.
		return errors.Join(errs...)
	}
	j.mounts = nil
	if err := os.RemoveAll(j.Dir()); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	return nil
}

// CgroupDirs are the VM's cgroup directories the jailer made under the
// hierarchy mounted at root: one on v2, one per controller of Cgroups on
// v1 (the file's prefix names it).
func (j *Jail) CgroupDirs(root string) []string {
	if j.CgroupVersion == 2 {
		return []string{filepath.Join(root, j.CgroupParent, j.ID)}
	}
	seen := map[string]bool{}
	var out []string
	for _, c := range j.Cgroups {
		ctrl, _, _ := strings.Cut(c, ".")
		if !seen[ctrl] {
			seen[ctrl] = true
			out = append(out, filepath.Join(root, ctrl, j.CgroupParent, j.ID))
		}
	}
	return out
}

// WaitAPI waits for the jailed Firecracker's API socket to answer.
func (j *Jail) WaitAPI(ctx context.Context) (*Client, error) {
	c := NewClient(j.HostPath(APISock))
	if err := c.WaitReady(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
