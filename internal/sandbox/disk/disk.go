// Package disk gives a workspace a hard size limit: its own ext4
// filesystem in a sparse image file, loop-mounted on the host where the
// sandbox tiers bind-mount the workspace from. A sandbox that fills it gets
// ENOSPC; the host's filesystem and every other workspace are untouched.
//
// Project quotas on a shared filesystem would avoid the loop device, but
// they need a kernel built with quota support (CONFIG_QUOTA, or XFS quota),
// which not every host has; a filesystem per workspace needs only loop
// devices and ext4. The image is also one file to move or snapshot.
package disk

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// MinSize is the smallest workspace disk (ext4's metadata needs room).
const MinSize = 8 << 20

// Disk is a workspace filesystem: mounted at Dir, or, with Dir empty,
// an image mounted nowhere (see Unmounted), which a tier whose guest runs
// a kernel of its own attaches as a block device.
type Disk struct {
	Image string // the image file
	Dir   string // where it is mounted ("": nowhere)
	Size  int64

	readOnly bool
}

// Create makes a sparse ext4 image of size bytes at img (which must not
// exist), owned at its root by uid:gid, and mounts it at dir (an existing
// empty directory) with nodev and nosuid. The mount holds the only
// reference to its loop device, which is released when it is unmounted.
func Create(img, dir string, size int64, uid, gid int) (*Disk, error) {
	if err := format(img, size, uid, gid); err != nil {
		return nil, err
	}
	return mountNew(img, dir, size)
}

// format writes a fresh, empty filesystem image.
func format(img string, size int64, uid, gid int) (err error) {
	if size < MinSize {
		return fmt.Errorf("workspace disk: %d bytes is below the minimum of %d", size, MinSize)
	}
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("workspace disk: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(img)
		}
	}()
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return fmt.Errorf("workspace disk: size the image: %w", err)
	}
	// No reserved blocks (the quota is the user's); inode tables and the
	// journal initialized lazily and never zeroed in the background
	// (noinit_itable), so the image stays sparse. Small disks go without
	// a journal, which would take a large share of them.
	args := []string{"-q", "-F", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=" + strconv.Itoa(uid) + ":" + strconv.Itoa(gid)}
	if size < 256<<20 {
		args = append(args, "-O", "^has_journal")
	}
	out, err := exec.Command("mkfs.ext4", append(args, img)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("workspace disk: mkfs.ext4: %v: %s", err, out)
	}
	return nil
}

// mountNew mounts a freshly made image and clears its root.
func mountNew(img, dir string, size int64) (*Disk, error) {
	d := &Disk{Image: img, Dir: dir, Size: size}
	if err := d.mount(); err != nil {
		os.Remove(img)
		return nil, err
	}
	// lost+found would show in the workspace; e2fsck recreates it if needed.
	if err := os.Remove(filepath.Join(dir, "lost+found")); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.Close()
		os.Remove(img)
		return nil, fmt.Errorf("workspace disk: %w", err)
	}
	return d, nil
}

// Factory makes workspace disks of one size by copying a template image
// formatted once (only its few MiB of data; holes stay holes), which is
// several times faster than running mkfs.ext4 for each.
type Factory struct {
	Size     int64
	template string

	mu  sync.Mutex
	err error
}

// NewFactory returns a factory keeping its template in dir.
func NewFactory(dir string, size int64) *Factory {
	return &Factory{Size: size, template: filepath.Join(dir, fmt.Sprintf("template-%d.img", size))}
}

// Create makes a disk like the package-level Create, owned by root (the
// tiers give the workspace to the sandbox's user).
func (f *Factory) Create(img, dir string) (*Disk, error) {
	if err := f.ensureTemplate(); err != nil {
		return nil, err
	}
	if err := sparseCopy(f.template, img, f.Size); err != nil {
		os.Remove(img)
		return nil, fmt.Errorf("workspace disk: %w", err)
	}
	return mountNew(img, dir, f.Size)
}

func (f *Factory) ensureTemplate() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	if fi, err := os.Stat(f.template); err == nil && fi.Size() == f.Size {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(f.template), 0o700); err != nil {
		return fmt.Errorf("workspace disk: %w", err)
	}
	tmp := f.template + ".new"
	os.Remove(tmp)
	if err := format(tmp, f.Size, 0, 0); err != nil {
		return err
	}
	return os.Rename(tmp, f.template)
}

// sparseCopy copies src's data extents into a new file dst of size bytes.
func sparseCopy(src, dst string, size int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(size); err != nil {
		return err
	}
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole remains
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		for pos := data; pos < hole; {
			inOff, outOff := pos, pos
			n, err := unix.CopyFileRange(int(in.Fd()), &inOff, int(out.Fd()), &outOff, int(hole-pos), 0)
			if err != nil {
				return fmt.Errorf("copy: %w", err)
			}
			if n == 0 {
				return errors.New("copy: short template")
			}
			pos += int64(n)
		}
		off = hole
	}
	return out.Close()
}

// Mount mounts an existing workspace image at dir (an empty directory),
// read-only if asked: to look into a finished run's workspace.
func Mount(img, dir string, readOnly bool) (*Disk, error) {
	fi, err := os.Stat(img)
	if err != nil {
		return nil, fmt.Errorf("workspace disk: %w", err)
	}
	d := &Disk{Image: img, Dir: dir, Size: fi.Size(), readOnly: readOnly}
	return d, d.mount()
}

// mount attaches the image to a free loop device (autoclear) and mounts it.
func (d *Disk) mount() error {
	mode, flags := os.O_RDWR, uintptr(unix.MS_NODEV|unix.MS_NOSUID)
	if d.readOnly {
		mode, flags = os.O_RDONLY, flags|unix.MS_RDONLY
	}
	img, err := os.OpenFile(d.Image, mode|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("workspace disk: %w", err)
	}
	defer img.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("workspace disk: %w", err)
	}
	defer ctl.Close()
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("workspace disk: find a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		loop, err := openLoop(dev)
		if err != nil {
			return fmt.Errorf("workspace disk: %w", err)
		}
		cfg := &unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		if d.readOnly {
			cfg.Info.Flags |= unix.LO_FLAGS_READ_ONLY
		}
		copy(cfg.Info.File_name[:], d.Image)
		err = unix.IoctlLoopConfigure(int(loop.Fd()), cfg)
		if errors.Is(err, unix.EBUSY) && attempt < 16 {
			loop.Close() // another process took it first
			continue
		}
		if err != nil {
			loop.Close()
			return fmt.Errorf("workspace disk: attach %s: %w", dev, err)
		}
		err = unix.Mount(dev, d.Dir, "ext4", flags, "noinit_itable")
		loop.Close() // the mount (if any) now holds the device; autoclear frees it with the mount
		if err != nil {
			return fmt.Errorf("workspace disk: mount %s at %s: %w", dev, d.Dir, err)
		}
		return nil
	}
}

// openLoop opens a loop device, waiting briefly for its node to appear
// (LOOP_CTL_GET_FREE may have just created the device).
func openLoop(dev string) (*os.File, error) {
	for i := 0; ; i++ {
		f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil || !errors.Is(err, os.ErrNotExist) || i == 50 {
			return f, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Recover makes an image that a guest kernel had mounted fit for the
// host to mount again: a guest ended by killing its VM leaves the file
// system unclean (its journal to replay), which the host's kernel refuses
// to mount read-only. e2fsck replays the journal and checks the whole file
// system (-f), repairing what it finds (-y), in user space: the host's
// kernel then mounts only what e2fsck passed, never a guest's raw writes.
// e2fsck reporting errors it corrected is success.
func Recover(img string) error {
	out, err := exec.Command("e2fsck", "-f", "-y", img).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() < 4 {
		return nil // 1, 2: errors corrected
	}
	if err != nil {
		return fmt.Errorf("workspace disk: e2fsck %s: %v: %s", filepath.Base(img), err, lastLines(out, 3))
	}
	return nil
}

// lastLines is the last n lines of out, on one line.
func lastLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "; ")
}

// Check reports what this host lacks for workspace disks: the loop
// device control file and mkfs.ext4.
func Check() error {
	f, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loop devices (%w)", err)
	}
	f.Close()
	for _, tool := range []string{"mkfs.ext4", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s from e2fsprogs (%w)", tool, err)
		}
	}
	return nil
}

// Attached reports whether a loop device still has the image at img
// attached: it is mounted somewhere, or a lazy unmount (Close of a busy
// disk) has not released it yet, so its bytes may still change.
func Attached(img string) bool {
	abs, err := filepath.Abs(img)
	if err != nil {
		return false
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == abs {
			return true
		}
	}
	return false
}

// Free is how many bytes the workspace can still take.
func (d *Disk) Free() (int64, error) {
	if d.Dir == "" {
		return 0, errors.New("workspace disk: not mounted")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.Dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// Full reports whether the workspace has (almost) no room left: no more
// than ext4 keeps back for its own metadata at ENOSPC (2% of the disk, at
// most 4096 blocks) plus 1 MiB.
func (d *Disk) Full() bool {
	if d.Dir == "" {
		return false
	}
	var st unix.Statfs_t
	if err := unix.Statfs(d.Dir, &st); err != nil {
		return false
	}
	held := min(d.Size/50, 4096*st.Bsize)
	return int64(st.Bavail)*st.Bsize <= held+1<<20
}

// Unmounted returns the Disk of the image at img, mounted nowhere: its
// Close does nothing and Full is false (the host cannot look into it).
func Unmounted(img string) (*Disk, error) {
	fi, err := os.Stat(img)
	if err != nil {
		return nil, fmt.Errorf("workspace disk: %w", err)
	}
	return &Disk{Image: img, Size: fi.Size()}, nil
}

// Detach unmounts the disk and keeps it as Unmounted would return it.
func (d *Disk) Detach() error {
	if err := d.Close(); err != nil {
		return err
	}
	d.Dir = ""
	return nil
}

// Close unmounts the disk (its loop device goes with it); the image file
// stays. Safe to call more than once, and on a disk mounted nowhere.
func (d *Disk) Close() error {
	if d.Dir == "" {
		return nil
	}
	err := unix.Unmount(d.Dir, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(d.Dir, unix.MNT_DETACH)
	}
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("workspace disk: unmount %s: %w", d.Dir, err)
	}
	return nil
}
