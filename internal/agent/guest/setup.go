package guest

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent"
)

// DefaultHostname is the sandbox's hostname when Init names none.
const DefaultHostname = "helmr-sandbox"

// mountpoints are created in the runtime layer so that the read-only root
// has a directory to mount each on, whatever the image holds.
var mountpoints = []string{"opt/helmr", "proc", "dev", "sys", "tmp", "run"}

// Prepare is the part of the setup that does not depend on init, done in
// the agent's fresh namespaces while it waits for init: it makes every
// mount private, so nothing done later propagates to the host, and limits
// what the processes it will start can gain (LimitExec).
func Prepare() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	return LimitExec()
}

// Setup builds the sandbox's root in the agent's fresh namespaces and pivots
// into it: an overlay of a tmpfs runtime layer (hostname, hosts,
// resolv.conf, mountpoints) over the image layers, writable through an
// upper layer on a tmpfs of cfg.RootSize bytes (read-only without one),
// the identity files bound read-only over it, the workspace bound
// read-write, /opt/helmr read-only, fresh proc, dev, devpts, shm, tmp and
// run, sysfs read-only where the kernel allows it. It then sets the hostname,
// brings up loopback and closes cfg.CloseFDs. It must run after Prepare and
// before Harden.
func Setup(cfg *agent.Init, log *slog.Logger) error {
	if cfg.Hostname == "" {
		cfg.Hostname = DefaultHostname
	}
	if !filepath.IsAbs(cfg.Workspace) || len(cfg.RootLayers) == 0 {
		return fmt.Errorf("setup: need an absolute workspace and at least one root layer")
	}
	if err := unix.Chdir(cfg.StateDir); err != nil {
		return fmt.Errorf("enter state dir: %w", err)
	}
	if err := mkdirMount("tmpfs", "scratch", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return err
	}
	if err := unix.Chdir("scratch"); err != nil {
		return fmt.Errorf("enter scratch: %w", err)
	}
	if err := writeRuntimeLayer("runtime", cfg); err != nil {
		return err
	}
	if err := mountRoot("root", cfg); err != nil {
		return err
	}
	if err := mountSystem("root", log); err != nil {
		return err
	}
	if err := pivot("root"); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	if err := loopbackUp(); err != nil {
		return err
	}
	for _, fd := range cfg.CloseFDs {
		_ = unix.Close(fd)
	}
	return nil
}

// writeRuntimeLayer fills the top layer: the files Helmr owns in /etc and
// an empty directory for every mountpoint.
func writeRuntimeLayer(dir string, cfg *agent.Init) error {
	for _, d := range append([]string{"etc", cfg.Workspace[1:]}, mountpoints...) {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("runtime layer: %w", err)
		}
	}
	var resolv strings.Builder
	for _, ns := range cfg.DNS {
		fmt.Fprintf(&resolv, "nameserver %s\n", ns)
	}
	files := map[string]string{
		"etc/hostname": cfg.Hostname + "\n",
		"etc/hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
			"127.0.1.1\t" + cfg.Hostname + "\n",
		"etc/resolv.conf": resolv.String(),
	}
	if cfg.MachineID != "" {
		if !validMachineID(cfg.MachineID) {
			return fmt.Errorf("runtime layer: machine id %q is not 32 lower-case hex digits", cfg.MachineID)
		}
		files[machineIDFile] = cfg.MachineID + "\n"
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("runtime layer: %w", err)
		}
	}
	return nil
}

// identityFiles are the runtime layer's files that stay read-only in a
// writable root: bound over it, so that writes fail with EROFS and
// renames and removals with EBUSY.
var identityFiles = []string{"etc/hostname", "etc/hosts", "etc/resolv.conf"}

// machineIDFile is the runtime layer's machine id, an identity file too
// when Init gives one.
const machineIDFile = "etc/machine-id"

func validMachineID(id string) bool {
	if len(id) != 32 {
		return false
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// mountRoot mounts the overlay at root and binds the identity files, the
// workspace and /opt/helmr into it.
//
// With cfg.RootSize the overlay has an upper layer on a tmpfs mounted
// with size=RootSize: a write past it fails with ENOSPC. tmpfs pages are
// charged to the memory cgroup of the process that writes them, so what
// the sandbox writes to its root counts against its memory limit. The
// tmpfs lives only in the agent's mount namespace and is freed when the
// agent's namespaces end: nothing of it reaches the image's layers, which
// overlayfs only reads. The layers must show the image's owners for
// copy-up to work and for the sandbox's root to own what the image's root
// owns: the process tier attaches them idmapped into the sandbox's user
// namespace (see process.mounts).
func mountRoot(root string, cfg *agent.Init) error {
	lowers := []string{"/proc/self/cwd/runtime"}
	for i := len(cfg.RootLayers) - 1; i >= 0; i-- {
		layer := cfg.RootLayers[i]
		if strings.HasPrefix(layer, "fd:") {
			// Attach the detached mount under the scratch dir: overlayfs
			// takes layers from its own mount namespace only.
			dir := "layers/" + strconv.Itoa(i)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("root layer %d: %w", i, err)
			}
			if err := attach(layer, dir); err != nil {
				return fmt.Errorf("root layer %d: %w", i, err)
			}
			layer = "/proc/self/cwd/" + dir
		}
		lowers = append(lowers, layer)
	}
	for i, l := range lowers {
		lowers[i] = escapeOverlayPath(l)
	}
	opts := "lowerdir=" + strings.Join(lowers, ":")
	flags := uintptr(unix.MS_RDONLY)
	if cfg.RootSize > 0 {
		upper, err := mountUpper("upper", cfg.RootSize)
		if err != nil {
			return err
		}
		opts += upper
		flags = 0
	}
	if err := mkdirMount("overlay", root, "overlay", flags, opts); err != nil {
		return err
	}
	ids := identityFiles
	if cfg.MachineID != "" {
		ids = append(ids[:len(ids):len(ids)], machineIDFile)
	}
	for _, f := range ids {
		if err := bind("runtime/"+f, filepath.Join(root, f), true); err != nil {
			return fmt.Errorf("/%s: %w", f, err)
		}
	}
	if err := bind(cfg.WorkspaceSource, filepath.Join(root, cfg.Workspace), false); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	// Without a source, /opt/helmr is the runtime layer's empty directory,
	// bound read-only all the same: a writable root must not make it
	// writable.
	helmr := "runtime/opt/helmr"
	if cfg.HelmrSource != "" {
		helmr = cfg.HelmrSource
	}
	if cfg.HelmrWritable {
		var err error
		if helmr, err = mountWritableHelmr(helmr); err != nil {
			return err
		}
	}
	if err := bind(helmr, filepath.Join(root, "opt/helmr"), true); err != nil {
		return fmt.Errorf("/opt/helmr: %w", err)
	}
	return nil
}

// mountUpper mounts a tmpfs of size bytes at dir with an upper and a work
// directory for the root's overlay, and returns the overlay options that
// name them. In a user namespace overlayfs keeps its metadata (whiteouts,
// opaque directories) in user.* extended attributes (userxattr).
func mountUpper(dir string, size int64) (string, error) {
	data := "mode=0755,size=" + strconv.FormatInt(size, 10)
	if err := mkdirMount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return "", err
	}
	for _, d := range []string{"upper", "work"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return "", fmt.Errorf("root upper layer: %w", err)
		}
	}
	base := "/proc/self/cwd/" + dir
	return ",upperdir=" + escapeOverlayPath(base+"/upper") + ",workdir=" + escapeOverlayPath(base+"/work") + ",userxattr", nil
}

// escapeOverlayPath escapes the characters overlayfs splits options on.
func escapeOverlayPath(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `:`, `\:`, `,`, `\,`)
	return r.Replace(p)
}

// mountSystem mounts proc, dev, tmp, run and sys under root.
func mountSystem(root string, log *slog.Logger) error {
	const nsd = unix.MS_NOSUID | unix.MS_NODEV
	if err := unix.Mount("proc", root+"/proc", "proc", nsd|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount proc: %w", err)
	}
	if err := setupDev(root + "/dev"); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", root+"/tmp", "tmpfs", nsd, "mode=1777"); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	if err := unix.Mount("tmpfs", root+"/run", "tmpfs", nsd, "mode=0755"); err != nil {
		return fmt.Errorf("mount /run: %w", err)
	}
	// sysfs is mountable in a user namespace only together with a network
	// namespace it owns and while the host's /sys is fully visible; where
	// the kernel refuses, the sandbox has an empty /sys instead.
	err := unix.Mount("sysfs", root+"/sys", "sysfs", nsd|unix.MS_NOEXEC|unix.MS_RDONLY, "")
	if err != nil {
		log.Warn("sysfs not mounted", "err", err)
	}
	return nil
}

// pivot makes root the root of the mount namespace and detaches the old one.
func pivot(root string) error {
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("enter new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("enter /: %w", err)
	}
	return nil
}

func mkdirMount(source, target, fstype string, flags uintptr, data string) error {
	if err := os.Mkdir(target, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("mount %s: %w", target, err)
	}
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype, target, err)
	}
	return nil
}

// bind mounts source on target, read-only if asked. source is a path to
// bind or "fd:N", a detached mount (open_tree) to attach. A read-only
// remount must keep the flags the kernel locked on the source mount.
func bind(source, target string, readOnly bool) error {
	if strings.HasPrefix(source, "fd:") {
		if err := attach(source, target); err != nil {
			return err
		}
	} else if err := unix.Mount(source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", target, err)
	}
	if !readOnly {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", target, err)
	}
	const keep = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_NOATIME | unix.MS_NODIRATIME | unix.MS_RELATIME
	flags := uintptr(st.Flags)&keep | unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %w", target, err)
	}
	return nil
}

// attach mounts the detached mount "fd:N" on target.
func attach(source, target string) error {
	n, err := strconv.Atoi(strings.TrimPrefix(source, "fd:"))
	if err != nil {
		return fmt.Errorf("attach %s: bad source %q", target, source)
	}
	if err := unix.MoveMount(n, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("attach %s: %w", target, err)
	}
	return nil
}

// resolveFDs rewrites cfg's "fd:N" references, indexes into the descriptors
// received with init, as the agent's descriptor numbers ("fd:<fd>").
func resolveFDs(cfg *agent.Init, fds []int) error {
	refs := append([]*string{&cfg.WorkspaceSource, &cfg.HelmrSource}, make([]*string, len(cfg.RootLayers))...)
	for i := range cfg.RootLayers {
		refs[2+i] = &cfg.RootLayers[i]
	}
	for _, ref := range refs {
		s, ok := strings.CutPrefix(*ref, "fd:")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n >= len(fds) {
			return fmt.Errorf("init names %q but %d descriptors came with it", *ref, len(fds))
		}
		*ref = "fd:" + strconv.Itoa(fds[n])
	}
	return nil
}
