package guest

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// devices are bound from the host's /dev: a user namespace cannot mknod.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// devLinks are the standard /dev symlinks.
var devLinks = map[string]string{
	"fd":     "/proc/self/fd",
	"stdin":  "/proc/self/fd/0",
	"stdout": "/proc/self/fd/1",
	"stderr": "/proc/self/fd/2",
	"ptmx":   "pts/ptmx",
	"core":   "/proc/kcore",
}

// setupDev mounts a small /dev: the device nodes above, a private devpts
// instance, /dev/shm, and the standard links; the tmpfs itself ends up
// read-only.
func setupDev(dev string) error {
	const flags = unix.MS_NOSUID | unix.MS_NOEXEC
	if err := unix.Mount("tmpfs", dev, "tmpfs", flags, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, name := range devices {
		target := filepath.Join(dev, name)
		if err := os.WriteFile(target, nil, 0o666); err != nil {
			return fmt.Errorf("/dev/%s: %w", name, err)
		}
		if err := unix.Mount("/dev/"+name, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", name, err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return fmt.Errorf("/dev/%s: %w", d, err)
		}
	}
	pts := filepath.Join(dev, "pts")
	err := unix.Mount("devpts", pts, "devpts", flags, "newinstance,ptmxmode=0666,mode=0620,gid=5")
	if err != nil { // gid 5 (tty) may be unmapped
		err = unix.Mount("devpts", pts, "devpts", flags, "newinstance,ptmxmode=0666,mode=0620")
	}
	if err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	if err := unix.Mount("shm", filepath.Join(dev, "shm"), "tmpfs", flags|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	for name, target := range devLinks {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return fmt.Errorf("/dev/%s: %w", name, err)
		}
	}
	if err := unix.Mount("", dev, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("remount /dev read-only: %w", err)
	}
	return nil
}
