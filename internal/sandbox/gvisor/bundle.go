package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent/guest"
	"github.com/helmr/helmr/internal/sandbox"
)

// The subset of the OCI runtime spec (1.0) that the bundle uses; the field
// names follow github.com/opencontainers/runtime-spec/specs-go.
type (
	ociSpec struct {
		Version  string     `json:"ociVersion"`
		Process  ociProcess `json:"process"`
		Root     ociRoot    `json:"root"`
		Hostname string     `json:"hostname"`
		Mounts   []ociMount `json:"mounts"`
		Linux    ociLinux   `json:"linux"`
	}
	ociProcess struct {
		User            ociUser   `json:"user"`
		Args            []string  `json:"args"`
		Env             []string  `json:"env"`
		Cwd             string    `json:"cwd"`
		Capabilities    ociCaps   `json:"capabilities"`
		Rlimits         []ociRlim `json:"rlimits,omitempty"`
		NoNewPrivileges bool      `json:"noNewPrivileges"`
	}
	ociUser struct {
		UID uint32 `json:"uid"`
		GID uint32 `json:"gid"`
	}
	ociCaps struct {
		Bounding    []string `json:"bounding"`
		Effective   []string `json:"effective"`
		Inheritable []string `json:"inheritable"`
		Permitted   []string `json:"permitted"`
		Ambient     []string `json:"ambient"`
	}
	ociRlim struct {
		Type string `json:"type"`
		Hard uint64 `json:"hard"`
		Soft uint64 `json:"soft"`
	}
	ociRoot struct {
		Path     string `json:"path"`
		Readonly bool   `json:"readonly"`
	}
	ociMount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	ociLinux struct {
		Namespaces  []ociNamespace `json:"namespaces"`
		CgroupsPath string         `json:"cgroupsPath"`
		Resources   ociResources   `json:"resources"`
	}
	ociNamespace struct {
		Type string `json:"type"`
		Path string `json:"path,omitempty"`
	}
	ociResources struct {
		Memory *ociMemory `json:"memory,omitempty"`
		CPU    *ociCPU    `json:"cpu,omitempty"`
		Pids   *ociPids   `json:"pids,omitempty"`
	}
	ociMemory struct {
		Limit int64 `json:"limit"`
	}
	ociCPU struct {
		Quota  int64  `json:"quota"`
		Period uint64 `json:"period"`
	}
	ociPids struct {
		Limit int64 `json:"limit"`
	}
)

// cfsPeriod is the CPU quota period and minQuota the kernel's smallest
// quota, in microseconds.
const (
	cfsPeriod = 100000
	minQuota  = 1000
)

// agentCaps are the agent's capabilities (bounding, permitted and
// effective; inheritable and ambient are empty, no_new_privs is set): what
// it needs to start processes as uid:gid and to signal them, plus
// CAP_SETPCAP, with which `helmr-agent serve` empties the bounding set
// before it serves (guest.LimitExec), so that every process it starts, uid
// 0 included, ends its exec with no capability, and CAP_SYS_RESOURCE, with
// which the Sentry never applies RLIMIT_NPROC to the agent: the agent sets
// the sandbox's process cap as its own limit, which what it starts
// inherits (guest.Server.SetChildNproc).
func agentCaps(uid uint32) []string {
	// CHOWN, DAC_OVERRIDE and FOWNER place a run's secret files with
	// their declared owner and mode (agent.WriteFile).
	rest := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_SYS_RESOURCE"}
	if uid == 0 {
		return append([]string{"CAP_SETGID", "CAP_SETPCAP"}, rest...)
	}
	return append([]string{"CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_SETPCAP"}, rest...)
}

// buildCaps are the capabilities a build step's root holds inside the
// Sentry: the default set of Docker and containerd.
var buildCaps = []struct {
	name string
	num  int
}{
	{"CAP_CHOWN", 0}, {"CAP_DAC_OVERRIDE", 1}, {"CAP_FOWNER", 3}, {"CAP_FSETID", 4}, {"CAP_KILL", 5},
	{"CAP_SETGID", 6}, {"CAP_SETUID", 7}, {"CAP_SETPCAP", 8}, {"CAP_NET_BIND_SERVICE", 10},
	{"CAP_NET_RAW", 13}, {"CAP_SYS_CHROOT", 18}, {"CAP_MKNOD", 27}, {"CAP_AUDIT_WRITE", 29}, {"CAP_SETFCAP", 31},
}

// bundle is one sandbox's directory: config.json, the identity files, the
// mountpoints layer and the root's overlay mountpoint.
type bundle struct {
	dir    string
	rootfs string // the root's host path: an overlay (see mountRoot)
	// netns, if set, is the network namespace (a bind mount in dir) the
	// sandbox joins and runsc takes its interface from; otherwise runsc
	// gives the sandbox loopback only.
	netns string
}

// write creates b's directory, files and root for spec.
func (b *bundle) write(cfg *Config, spec sandbox.Spec) error {
	if err := os.Mkdir(b.dir, 0o700); err != nil {
		return fmt.Errorf("bundle dir: %w", err)
	}
	for name, content := range identityFiles(spec) {
		if err := os.WriteFile(filepath.Join(b.dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("bundle: %w", err)
		}
	}
	if err := os.Mkdir(filepath.Join(b.dir, emptyHelmr), 0o755); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := b.mountRoot(spec); err != nil {
		return err
	}
	data, err := json.MarshalIndent(ociSpecFor(cfg, spec, b), "", "  ")
	if err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return nil
}

// emptyHelmr is the bundle's empty directory bound at /opt/helmr in a
// sandbox without HelmrHost.
const emptyHelmr = "empty-helmr"

// identityFiles are /etc/hostname, /etc/hosts and /etc/resolv.conf, by
// their names in the bundle directory.
func identityFiles(spec sandbox.Spec) map[string]string {
	var resolv strings.Builder
	for _, ns := range spec.DNS {
		fmt.Fprintf(&resolv, "nameserver %s\n", ns)
	}
	return map[string]string{
		"hostname": spec.Hostname + "\n",
		"hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
			"127.0.1.1\t" + spec.Hostname + "\n",
		"resolv.conf": resolv.String(),
	}
}

// mountRoot merges a mountpoints layer (see writeMountpoints) over spec's
// layers with a read-only overlayfs (lower layers only, so nothing can be
// written through it) at rootfs/ in the bundle: the sandbox writes its
// root in gVisor's overlay above it (rootOverlay), never on the host.
// runsc's gofer creates missing mountpoints in the root on the host,
// which a read-only root refuses, and the image must not be written
// anyway: the mountpoints layer holds them.
func (b *bundle) mountRoot(spec sandbox.Spec) error {
	top := filepath.Join(b.dir, "mountpoints")
	if err := writeMountpoints(top, spec); err != nil {
		return err
	}
	b.rootfs = filepath.Join(b.dir, "rootfs")
	if err := os.Mkdir(b.rootfs, 0o755); err != nil {
		return fmt.Errorf("root mountpoint: %w", err)
	}
	lowers := []string{escapeOverlayPath(top)}
	for i := len(spec.RootLayers) - 1; i >= 0; i-- {
		lowers = append(lowers, escapeOverlayPath(spec.RootLayers[i]))
	}
	opts := "lowerdir=" + strings.Join(lowers, ":")
	flags := uintptr(unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	if spec.RootUpper != "" {
		// A build step: the root is writable and its changes land in the
		// upper directory, which becomes the step's layer.
		opts += ",upperdir=" + escapeOverlayPath(spec.RootUpper) + ",workdir=" + escapeOverlayPath(spec.RootWork)
		flags &^= unix.MS_RDONLY
	}
	if err := unix.Mount("overlay", b.rootfs, "overlay", flags, opts); err != nil {
		return fmt.Errorf("mount root overlay: %w", err)
	}
	return nil
}

// rootOverlay is runsc's --overlay2 for spec's sandbox, whose bundle is
// dir: a build step's root needs none (its writes go through the gofer
// into the host overlay's upper directory, RootUpper); every other
// sandbox's root gets gVisor's own overlay, "root:dir=<bundle>,size=N".
//
// What runsc offers and what each gives (gVisor's runsc/config.Overlay2
// and runsc/boot/vfs.go's configureOverlay; each checked with runsc on
// systrap, see testWritableRoot and testCheckpoint):
//
//   - the upper layer is always a tmpfs inside the Sentry, mounted with
//     size=N when the flag has one: a write past N fails with ENOSPC
//     (without size= an overlay upper has no bound at all).
//   - medium "memory" keeps its pages in the Sentry's main memory file,
//     charged to the sandbox's memory limit; "self" keeps them in a file
//     it creates inside the root's host directory, which our read-only
//     root overlay refuses, and which would be writing into the image;
//     "dir=D" keeps them in a file runsc creates in D and unlinks at once
//     (so it goes with the sandbox's last descriptor, and D is the bundle
//     directory, which Destroy removes). We take dir=: a sandbox's root
//     writes take the state directory's disk, not its memory. Where
//     HELMR_STATE_DIR is a tmpfs (/run often is), they take host memory,
//     charged to the sandbox's cgroup as the Sentry writes them.
//   - `runsc checkpoint` saves the overlay's file with the memory (a
//     private memory file in pages.img) and `runsc restore` loads it into
//     a new file in the new bundle: a file written to / before a
//     checkpoint is there after a restore, on another runtime too.
//   - the medium and the size are runsc flags, not per-container
//     annotations (the dev.gvisor.spec.rootfs.* annotations take a size
//     but dir= reads its directory from the flag), so each sandbox's
//     `runsc run` and `runsc restore` get their own; other commands don't
//     read them.
//
// StateDir holds no ',' or ':' (Config.Validate): the flag splits on them.
func rootOverlay(spec sandbox.Spec, dir string) string {
	if spec.RootUpper != "" {
		return "none"
	}
	return "root:dir=" + dir + ",size=" + strconv.FormatInt(spec.RootSizeBytes, 10)
}

// mountDirs and mountFiles are the mountpoints every root gets, besides
// the workspace.
var (
	mountDirs  = []string{"proc", "sys", "dev", "tmp", "run", "opt/helmr", filepath.Dir(AgentMount[1:])}
	mountFiles = []string{"etc/hostname", "etc/hosts", "etc/resolv.conf", AgentMount[1:]}
)

// writeMountpoints fills dir with an empty directory or file for every
// mountpoint of spec's container.
func writeMountpoints(dir string, spec sandbox.Spec) error {
	dirs := append([]string{spec.Workspace[1:], "etc"}, mountDirs...)
	for _, m := range spec.Mounts {
		dirs = append(dirs, m.Dest[1:])
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("mountpoints: %w", err)
		}
	}
	for _, f := range mountFiles {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			return fmt.Errorf("mountpoints: %w", err)
		}
	}
	return nil
}

// remove unmounts the root overlay (found by path, so a bundle a previous
// worker left is cleaned up too) and removes the directory.
func (b *bundle) remove() error {
	for _, m := range []string{"rootfs", "netns"} {
		err := unix.Unmount(filepath.Join(b.dir, m), unix.MNT_DETACH)
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
	}
	if err := os.RemoveAll(b.dir); err != nil {
		return fmt.Errorf("remove bundle: %w", err)
	}
	return nil
}

// escapeOverlayPath escapes the characters overlayfs splits options on.
func escapeOverlayPath(p string) string {
	return strings.NewReplacer(`\`, `\\`, `:`, `\:`, `,`, `\,`).Replace(p)
}

// ociSpecFor is the container's OCI spec.
func ociSpecFor(cfg *Config, spec sandbox.Spec, b *bundle) *ociSpec {
	tmpfs := func(dst, mode string) ociMount {
		return ociMount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=" + mode}}
	}
	bind := func(src, dst string, ro bool) ociMount {
		opts := []string{"rbind", "nosuid", "nodev"}
		if ro {
			opts = append(opts, "ro")
		} else {
			opts = append(opts, "rw")
		}
		return ociMount{Destination: dst, Type: "bind", Source: src, Options: opts}
	}
	mounts := []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "nodev", "noexec"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "nodev", "noexec", "ro"}},
		tmpfs("/tmp", "1777"),
		tmpfs("/run", "755"),
		tmpfs("/dev/shm", "1777"),
	}
	if spec.WorkspaceHost != "" {
		mounts = append(mounts, bind(spec.WorkspaceHost, spec.Workspace, false))
	}
	for _, m := range spec.Mounts {
		mounts = append(mounts, bind(m.Source, m.Dest, m.ReadOnly))
	}
	switch {
	case spec.HelmrHost != "":
		mounts = append(mounts, bind(spec.HelmrHost, "/opt/helmr", true))
	case spec.RootUpper == "":
		// A writable root must not make /opt/helmr writable: an empty
		// directory of the bundle stands in for HelmrHost.
		mounts = append(mounts, bind(filepath.Join(b.dir, emptyHelmr), "/opt/helmr", true))
	}
	mounts = append(mounts,
		bind(cfg.AgentPath, AgentMount, true),
		bind(filepath.Join(b.dir, "hostname"), "/etc/hostname", true),
		bind(filepath.Join(b.dir, "hosts"), "/etc/hosts", true),
		bind(filepath.Join(b.dir, "resolv.conf"), "/etc/resolv.conf", true),
	)
	res := ociResources{Pids: &ociPids{Limit: max(hostPidsPerGuest*spec.PidsLimit+cfg.MinHostPids, cfg.MinHostPids)}}
	if spec.MemoryBytes > 0 {
		res.Memory = &ociMemory{Limit: spec.MemoryBytes}
	}
	if spec.CPU > 0 {
		res.CPU = &ociCPU{Quota: max(int64(spec.CPU*cfsPeriod), minQuota), Period: cfsPeriod}
	}
	nproc := uint64(spec.PidsLimit)
	caps := agentCaps(spec.UID)
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		guest.ChildNprocEnv + "=" + strconv.FormatUint(nproc, 10)}
	if spec.RootUpper != "" {
		// A build step's root gets a container's default capabilities,
		// inside the Sentry (package managers chown and switch users).
		var nums []string
		for _, c := range buildCaps {
			if !slices.Contains(caps, c.name) {
				caps = append(caps, c.name)
			}
			nums = append(nums, strconv.Itoa(c.num))
		}
		env = append(env, guest.BuildCapsEnv+"="+strings.Join(nums, ","))
	}
	return &ociSpec{
		Version: "1.0.2",
		Process: ociProcess{
			User: ociUser{UID: 0, GID: 0},
			Args: []string{AgentMount, "serve", "--fd", "0"},
			// The agent caps what it starts at spec.PidsLimit processes per
			// uid (RLIMIT_NPROC, which the Sentry enforces on clone) and
			// stays uncapped itself (CAP_SYS_RESOURCE): see
			// guest.ChildNprocEnv.
			Env: env,
			Cwd: "/",
			Capabilities: ociCaps{
				Bounding: caps, Effective: caps, Permitted: caps,
				Inheritable: []string{}, Ambient: []string{},
			},
			NoNewPrivileges: true,
		},
		// Writable in the spec, so that runsc puts its overlay on it
		// (rootOverlay; runsc gives a read-only root none); the host
		// overlay under it stays read-only but for a build step's.
		Root:     ociRoot{Path: b.rootfs, Readonly: false},
		Hostname: spec.Hostname,
		Mounts:   mounts,
		Linux: ociLinux{
			Namespaces: []ociNamespace{
				{Type: "pid"}, {Type: "network", Path: b.netns}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"},
			},
			CgroupsPath: "/" + cfg.CgroupParent + "/" + spec.ID,
			Resources:   res,
		},
	}
}

// hostPidsPerGuest bounds the host threads and stub processes the systrap
// platform needs per guest task (each guest address space is a host stub
// process with its own threads): the host cgroup's pids limit is this many
// per allowed guest process, plus MinHostPids for the Sentry and the gofer.
// Too low a backstop lets a guest fork bomb crash the Sentry ("failed to get
// clone") instead of meeting the guest's RLIMIT_NPROC.
const hostPidsPerGuest = 4
