package guest

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The microVM tier's guest contract (see internal/sandbox/microvm): the
// kernel starts helmr-agent as /init from an initramfs that also holds
// VMModulesDir (the kernel modules, loaded in the order VMModulesDir/order
// lists). Disks are virtio-blk devices named by their serial: "helmr-<name>"
// (QEMU), or, where the VMM gives disks no serial of ours (Firecracker),
// by their order: VMArgDiskNames on the kernel command line names them in
// the order the VMM attached them (see findDisks). Each is mounted at
// VMDisksDir/<name>, read-write and synchronous for VMWorkspaceDisk and
// read-only for every other: the root layers' at once, the others once
// the host's start message (VMCtl) came. The worker's stream is the
// virtio-serial port named VMPort and the init's control channel the port
// VMCtlPort, or, with VMArgAgent=vsock:PORT on the command line, the
// first connections to AF_VSOCK ports PORT+1 (control) and PORT (stream)
// (Firecracker's hybrid vsock). After that the agent is the process
// tier's: it reads init and sets the sandbox up (Setup) from the mounted
// disks. With VMArgHaltReboot on the command line the init ends the VM by
// a reboot rather than a power-off (Firecracker implements no ACPI
// power-off; a reboot with reboot=k ends its process).
const (
	VMModulesDir    = "/modules"
	VMDisksDir      = "/run/helmr/disks"
	VMStateDir      = "/run/helmr"
	VMPort          = "helmr"
	VMDiskPrefix    = "helmr-"
	VMWorkspaceDisk = "workspace"
	// VMProbeArg on the kernel command line makes the init print
	// VMProbeOK on the console and power off: a boot probe.
	VMProbeArg = "helmr.probe=1"
	VMProbeOK  = "helmr-vm-probe-ok"
	// VMArgDiskNames names the disks in the order the VMM attached them,
	// comma-separated, for a VMM whose disks carry no serial of ours.
	VMArgDiskNames = "helmr.disknames="
	// VMArgAgent selects the worker's stream: "vsock:PORT" listens on
	// AF_VSOCK port PORT (and the control channel on PORT+1); absent, the
	// virtio-serial ports VMPort and VMCtlPort.
	VMArgAgent = "helmr.agent="
	// VMArgHaltReboot makes the init end the VM with a reboot.
	VMArgHaltReboot = "helmr.halt=reboot"
)

// vmDeviceWait bounds the wait for the port and disks to appear once
// their drivers are loaded.
const vmDeviceWait = 10 * time.Second

// RunVM is the agent as a VM's init (PID 1). It moves off the initramfs's
// rootfs (which pivot_root refuses) onto a bind mount of it, mounts /proc,
// /sys and /dev, loads the modules, waits for the disks and ports, mounts
// the root layers' disks, makes the sandbox's cgroup and starts the sandbox's agent (RunVMSandbox) in
// it, in a PID and mount namespace of its own, with the virtio-serial
// port as its stream, where it waits for the init's go-ahead. Then it
// says idle on the control channel (see VMCtl): a boot snapshot of the
// VM may be taken now, with the sandbox's agent started already. Once the
// host sends start, it sets the clock and entropy, mounts the sandbox's
// own disks (/opt/helmr, the workspace; the
// agent's namespace sees them: VMStateDir is a shared mount), sets the
// network up, writes the cgroup's limits and lets the agent go on, to
// read its init from the worker; then it answers resume on the control
// channel until that agent ends. Whatever happens, it powers the VM off
// when it returns: init exiting would panic the kernel.
func RunVM(log *slog.Logger) error {
	defer vmPowerOff()
	if err := vmBase(); err != nil {
		return err
	}
	if vmCmdline(VMProbeArg) {
		fmt.Println(VMProbeOK)
		return nil
	}
	if err := loadModules(VMModulesDir, log); err != nil {
		return err
	}
	disks, err := waitDisks()
	if err != nil {
		return err
	}
	ctlPort, port, err := openStreams(vmCmdlineText())
	if err != nil {
		return err
	}
	defer ctlPort.Close()
	layers := map[string]string{}
	for name, dev := range disks {
		if isLayerDisk(name) {
			layers[name] = dev
		}
	}
	if err := mountDisks(layers, log); err != nil {
		return err
	}
	cg, err := vmCgroup()
	if err != nil {
		return err
	}
	agentDone, goAhead, err := startSandboxAgent(port, cg, log)
	port.Close()
	cg.Close()
	if err != nil {
		return err
	}
	ctl := newVMCtl(ctlPort)
	dropCaches()
	if err := ctl.send(VMCtl{Type: VMCtlIdle}); err != nil {
		return fmt.Errorf("vm init: %w", err)
	}
	start, err := ctl.waitStart()
	if err == nil {
		err = setupVM(disks, start, log)
	}
	if err != nil {
		goAhead.Close() // the agent reads no go-ahead and ends
		_ = ctl.send(VMCtl{Type: VMCtlError, Error: err.Error()})
		return err
	}
	if _, err := goAhead.Write([]byte{1}); err != nil {
		return fmt.Errorf("vm init: let the sandbox's agent go on: %w", err)
	}
	goAhead.Close()
	go ctl.serve(log)
	return <-agentDone
}

// isLayerDisk reports whether the disk called name is a root layer's
// ("layer0", "layer1", ...): the same bytes in every sandbox of an image,
// so mounted before the idle moment and kept in boot snapshots (the host
// keys them by the layers' digests).
func isLayerDisk(name string) bool { return strings.HasPrefix(name, "layer") }

// setupVM does what start asks.
func setupVM(disks map[string]string, start *VMStart, log *slog.Logger) error {
	if err := start.Fresh.apply(); err != nil {
		return err
	}
	// The layers are mounted already (see RunVM); the sandbox's own disks
	// are the ones attached now, whatever the kernel probed before.
	own := map[string]string{}
	for name, dev := range disks {
		if !isLayerDisk(name) {
			own[name] = dev
		}
	}
	if err := flushDiskBuffers(own); err != nil {
		return err
	}
	if err := mountDisks(own, log); err != nil {
		return err
	}
	boot := start.Boot
	if boot.WorkspaceOwner != nil {
		if err := chownWorkspace(*boot.WorkspaceOwner); err != nil {
			return err
		}
	}
	if boot.Net != nil {
		if err := boot.Net.up(); err != nil {
			return err
		}
	}
	return vmLimits(boot)
}

// vmBase leaves rootfs for a bind mount of it (pivot_root needs a root
// that has a parent mount), mounts the kernel's file systems and points
// stdio at the console.
func vmBase() error {
	if err := os.MkdirAll("/newroot", 0o755); err != nil {
		return fmt.Errorf("vm init: %w", err)
	}
	if err := unix.Mount("/", "/newroot", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("vm init: bind rootfs: %w", err)
	}
	if err := unix.Chdir("/newroot"); err != nil {
		return fmt.Errorf("vm init: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("vm init: move root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("vm init: chroot: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("vm init: %w", err)
	}
	mounts := []struct{ src, dir, fstype, data string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", "mode=0755"},
		{"tmpfs", VMStateDir, "tmpfs", "mode=0700"},
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return fmt.Errorf("vm init: %w", err)
		}
		if err := unix.Mount(m.src, m.dir, m.fstype, unix.MS_NOSUID, m.data); err != nil {
			return fmt.Errorf("vm init: mount %s: %w", m.dir, err)
		}
	}
	// The disks mounted below VMStateDir once the sandbox's agent runs in
	// its own mount namespace reach it there.
	if err := unix.Mount("", VMStateDir, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("vm init: share %s: %w", VMStateDir, err)
	}
	if fd, err := unix.Open("/dev/console", unix.O_RDWR, 0); err == nil {
		for _, n := range []int{0, 1, 2} {
			_ = unix.Dup2(fd, n)
		}
		if fd > 2 {
			_ = unix.Close(fd)
		}
	}
	return nil
}

// vmCmdline reports whether the kernel command line holds word.
func vmCmdline(word string) bool {
	for _, w := range strings.Fields(vmCmdlineText()) {
		if w == word {
			return true
		}
	}
	return false
}

// vmCmdlineText is the kernel command line.
func vmCmdlineText() string {
	b, _ := os.ReadFile("/proc/cmdline")
	return string(b)
}

// loadModules loads dir's modules in the order dir/order lists
// (dependencies first) with finit_module; a module already loaded or
// built in is fine.
func loadModules(dir string, log *slog.Logger) error {
	b, err := os.ReadFile(filepath.Join(dir, "order"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // a kernel with everything built in
	}
	if err != nil {
		return fmt.Errorf("vm init: modules: %w", err)
	}
	for _, name := range strings.Fields(string(b)) {
		f, err := os.Open(filepath.Join(dir, filepath.Base(name)))
		if err != nil {
			return fmt.Errorf("vm init: module %s: %w", name, err)
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("vm init: load module %s: %w", name, err)
		}
		log.Debug("module loaded", "module", name)
	}
	return nil
}

// waitDisks waits for the helmr disks and maps their names to their
// device nodes: those whose serial is VMDiskPrefix+name, or, with
// VMArgDiskNames, the disk at name's place in the VMM's order. The host
// says how many disks it attaches on the kernel command line
// (helmr.disks=N, or the names' count), so that a disk whose driver is
// slow to probe is waited for rather than missed.
func waitDisks() (map[string]string, error) {
	want := 0
	cmdline := vmCmdlineText()
	for _, w := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(w, "helmr.disks="); ok {
			fmt.Sscanf(v, "%d", &want)
		}
	}
	names, err := parseDiskNames(cmdline)
	if err != nil {
		return nil, err
	}
	if names != nil {
		want = len(names)
	}
	deadline := time.Now().Add(vmDeviceWait)
	for {
		disks := findDisks(names)
		if len(disks) >= want {
			return disks, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("vm init: %d of %d disks appeared", len(disks), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mountDisks mounts each disk at VMDisksDir/name: ext4, read-only but for
// VMWorkspaceDisk (nodev, nosuid).
func mountDisks(disks map[string]string, log *slog.Logger) error {
	for name, dev := range disks {
		dir := filepath.Join(VMDisksDir, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("vm init: %w", err)
		}
		flags, data := uintptr(unix.MS_RDONLY), "noload"
		if name == VMWorkspaceDisk {
			// Synchronous: the host may end the VM at any moment (QEMU
			// killed), and what a process wrote must be on the disk by
			// then, not in the guest's page cache.
			// No lazy inode table init: its thread would zero the
			// tables in the background, on the guest's only CPU.
			flags, data = unix.MS_NODEV|unix.MS_NOSUID|unix.MS_SYNCHRONOUS|unix.MS_DIRSYNC, "noinit_itable"
		}
		if err := unix.Mount(dev, dir, "ext4", flags, data); err != nil {
			return fmt.Errorf("vm init: mount disk %s (%s): %w", name, dev, err)
		}
		log.Debug("disk mounted", "disk", name, "device", dev)
	}
	return nil
}

// openPort opens the virtio-serial port called name.
func openPort(name string) (*os.File, error) {
	deadline := time.Now().Add(vmDeviceWait)
	for {
		ents, _ := os.ReadDir("/sys/class/virtio-ports")
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join("/sys/class/virtio-ports", e.Name(), "name"))
			if err != nil || strings.TrimSpace(string(b)) != name {
				continue
			}
			f, err := os.OpenFile("/dev/"+e.Name(), os.O_RDWR, 0)
			if err != nil {
				return nil, fmt.Errorf("vm init: open port %s: %w", name, err)
			}
			return f, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("vm init: no virtio-serial port %q", name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// vmPowerOff syncs and powers the VM off, or reboots it where the host
// asked for that (VMArgHaltReboot: the VMM ends on the guest's reboot).
func vmPowerOff() {
	unix.Sync()
	if vmCmdline(VMArgHaltReboot) {
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	}
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
}
