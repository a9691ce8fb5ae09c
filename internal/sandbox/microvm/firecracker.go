package microvm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent"
	"github.com/helmr/helmr/internal/agent/guest"
	"github.com/helmr/helmr/internal/sandbox/microvm/firecracker"
	"github.com/helmr/helmr/internal/sandbox/network"
)

// Under Firecracker (see the firecracker package for the jail's layout):
const (
	// agentVsockPort is the guest's AF_VSOCK port of the agent's stream;
	// the init's control channel is the next one.
	agentVsockPort = 1024
	// fcTap is the guest's TAP device in Firecracker's namespace.
	fcTap = "fc0"
	// fcLog is Firecracker's own log, in the jail.
	fcLog = "/firecracker.log"
	// fcMemOverhead is Firecracker's memory beyond the guest's.
	fcMemOverhead = 64 << 20
	// fcBootArgs start every Firecracker guest's command line: the console
	// on the serial port, a panic rebooting (which ends Firecracker: it
	// exits when the guest resets through the keyboard controller,
	// reboot=k), no PCI probe, a quiet i8042.
	fcBootArgs = "console=ttyS0 reboot=k panic=1 pci=off i8042.noaux i8042.nomux i8042.dumbkbd quiet"
)

// fcVM is what a sandbox under Firecracker holds beyond QEMU's.
type fcVM struct {
	jail     *firecracker.Jail
	disks    []vmDisk // as placed, for a restore of a snapshot
	api      *firecracker.Client
	netns    string // the namespace Firecracker runs in
	ownNetns bool   // made by NewNamespace (no network): removed here
	cgroot   string
	owners   []fileOwner // files given to Firecracker's uid, given back
}

// fileOwner is a file's owner and mode before the jail's uid was given it.
type fileOwner struct {
	path     string
	uid, gid int
	mode     os.FileMode
}

// jails is where the Firecracker jails are (the jailer's chroot base): on
// the file system of the images, so that they are hard linked in.
func (c *Config) jails() string { return filepath.Join(c.StateDir, "jail") }

// jailID names a sandbox's jail and cgroup: unique per state directory
// (one worker's) and sandbox, in the jailer's alphabet.
func jailID(stateDir, sandboxID string) string {
	h := sha256.Sum256([]byte(stateDir + "\x00" + sandboxID))
	return "h" + hex.EncodeToString(h[:])[:20]
}

// newJail is the sandbox's jail, not yet prepared: its cgroup bounds the
// machine's memory and Firecracker's own.
func (s *Sandbox) newJail(id string) *firecracker.Jail {
	version, cgs := fcCgroups(s.rt.cfg.CgroupRoot, s.machine.MemMiB<<20+fcMemOverhead, s.spec.CPU)
	return &firecracker.Jail{
		ID: id, Jailer: s.rt.cfg.Firecracker.Jailer, Firecracker: s.rt.cfg.Firecracker.Firecracker,
		UID: s.rt.cfg.UID, GID: s.rt.cfg.GID, ChrootBase: s.rt.cfg.jails(),
		CgroupVersion: version, CgroupParent: s.rt.cfg.CgroupParent, Cgroups: cgs,
	}
}

// startFirecracker boots the guest under a jailed Firecracker and connects
// to its agent over vsock: the jail gets the kernel, initramfs and disks
// (placed, see firecracker.Jail.Place), a network namespace (the
// sandbox's bridged TAP, network.NewVMTap, or an empty one), a cgroup with
// the VM's limits (made by the jailer); then the API configures and starts
// the VM (firecracker.Machine), and the init's control channel and the
// agent's stream are the guest's vsock ports agentVsockPort+1 and
// agentVsockPort, dialled in that order (the init accepts them so).
func (s *Sandbox) startFirecracker(ctx context.Context, disks []vmDisk) error {
	attach := s.machine.Net
	m := fcMachine(disks, s.machine, attach)
	jail := s.newJail(jailID(s.rt.cfg.StateDir, s.spec.ID))
	s.fc = &fcVM{jail: jail, disks: disks, cgroot: s.rt.cfg.CgroupRoot}
	if err := s.jailVM(disks, m); err != nil {
		return err
	}
	if err := s.fc.netNamespace(s, attach); err != nil {
		return err
	}
	if err := s.runJailer(); err != nil {
		return err
	}
	ctx, cancel := s.untilExit(ctx)
	defer cancel()
	api, err := jail.WaitAPI(ctx)
	if err != nil {
		return fmt.Errorf("firecracker: %w; console: %s", err, s.console.last())
	}
	s.fc.api = api
	if err := api.Boot(ctx, m); err != nil {
		return fmt.Errorf("boot: %w", err)
	}
	ctlConn, err := firecracker.DialVsockWait(ctx, jail.HostPath(firecracker.VsockSock), agentVsockPort+1)
	if err != nil {
		return fmt.Errorf("control channel over vsock: %w; console: %s", err, s.console.last())
	}
	ctl := newCtlConnOf(ctlConn)
	conn, err := firecracker.DialVsockWait(ctx, jail.HostPath(firecracker.VsockSock), agentVsockPort)
	if err != nil {
		ctl.close()
		return fmt.Errorf("agent over vsock: %w; console: %s", err, s.console.last())
	}
	s.setStreams(agent.NewClient(conn, s.log), ctl)
	return nil
}

// fcMachine is the VM Firecracker is told of: the guestfmt kernel
// (vmlinux) and initramfs, the disks as /disks/<name>.ext4 in order and
// named in that order on the command line (the guest's init finds them
// by it: Firecracker's drives carry no serial of ours), the agent's
// stream and the init's control channel on vsock, the machine's size
// and, with attach, its interface on the TAP fcTap. The sandbox's limits
// and the guest's interface travel on the control channel (VMStart).
func fcMachine(disks []vmDisk, shape machine, attach bool) firecracker.Machine {
	m := firecracker.Machine{
		Kernel: "/vmlinux", Initrd: "/initramfs.cpio", VCPUs: shape.CPUs, MemMiB: shape.MemMiB,
		Vsock:  &firecracker.Vsock{GuestCID: firecracker.GuestCID, UDSPath: firecracker.VsockSock},
		Logger: &firecracker.Logger{LogPath: fcLog, Level: "Warning"},
	}
	var names []string
	for _, d := range disks {
		names = append(names, d.name)
		m.Drives = append(m.Drives, firecracker.Drive{DriveID: d.name, PathOnHost: "/disks/" + d.name + ".ext4", IsReadOnly: d.readOnly})
	}
	if attach {
		m.Net = &firecracker.NetworkInterface{IfaceID: "eth0", HostDevName: fcTap, GuestMAC: network.GuestMAC.String()}
	}
	m.BootArgs = strings.Join([]string{fcBootArgs, guest.VMArgDiskNames + strings.Join(names, ","),
		guest.VMArgAgent + "vsock:" + strconv.Itoa(agentVsockPort), guest.VMArgHaltReboot}, " ")
	return m
}

// jailVM prepares the jail and places in it the kernel, initramfs and
// disks (disks[i] at m's Drives[i]), each usable by Firecracker's uid
// (grant), and Firecracker's log file.
func (s *Sandbox) jailVM(disks []vmDisk, m firecracker.Machine) error {
	j := s.fc.jail
	if err := j.Prepare(); err != nil {
		return err
	}
	if err := j.Place(s.rt.cfg.Kernel.Vmlinux, m.Kernel, true); err != nil {
		return err
	}
	if err := j.Place(s.rt.initramfs, m.Initrd, true); err != nil {
		return err
	}
	for i, d := range disks {
		if err := s.fc.grant(d.path, d.readOnly, j.UID, j.GID); err != nil {
			return err
		}
		if err := j.Place(d.path, m.Drives[i].PathOnHost, d.readOnly); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(j.HostPath(fcLog), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("firecracker log: %w", err)
	}
	f.Close()
	return os.Chown(j.HostPath(fcLog), int(j.UID), int(j.GID))
}

// grant lets Firecracker's uid use a disk image: a read-only one (a
// cached layer, shared) by group, mode 0640 and group gid; a writable one
// by owner (uid:gid, 0600), given back by cleanup.
func (f *fcVM) grant(path string, readOnly bool, uid, gid uint32) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("disk %s: %w", path, err)
	}
	if readOnly {
		if err := os.Chown(path, -1, int(gid)); err != nil {
			return fmt.Errorf("disk %s: %w", path, err)
		}
		return os.Chmod(path, 0o640)
	}
	f.owners = append(f.owners, fileOwner{path: path, uid: int(st.Uid), gid: int(st.Gid), mode: os.FileMode(st.Mode & 0o7777)})
	if err := os.Chown(path, int(uid), int(gid)); err != nil {
		return fmt.Errorf("disk %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}

// netNamespace gives Firecracker its network namespace: the sandbox's
// bridged TAP (attach) or an empty one, so that it shares none of the
// host's.
func (f *fcVM) netNamespace(s *Sandbox, attach bool) error {
	f.netns = filepath.Join(s.dir, "netns")
	f.jail.Netns = f.netns
	if attach {
		link, err := network.NewVMTap(f.netns, s.spec.ID, fcTap, f.jail.UID, f.jail.GID, s.spec.Network)
		if err != nil {
			return err
		}
		s.link = link
		return nil
	}
	if err := network.NewNamespace(f.netns); err != nil {
		return err
	}
	f.ownNetns = true
	return nil
}

// runJailer starts the jailer, which execs Firecracker in place: the
// process is Firecracker's, its output the guest's console.
func (s *Sandbox) runJailer() error {
	return s.startVMM(s.fc.jail.Command(), "jailer")
}

// untilExit is ctx, also ended when the VMM exits.
func (s *Sandbox) untilExit(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// cleanup undoes the jail once Firecracker has exited: its directory and
// bind mounts, its cgroup, the namespace it made, the owners it changed.
func (f *fcVM) cleanup() []error {
	var errs []error
	if f.api != nil {
		f.api.Close()
	}
	if err := f.jail.Remove(); err != nil {
		errs = append(errs, err)
	}
	if err := removeCgroupDirs(f.jail.CgroupDirs(f.cgroot)); err != nil {
		errs = append(errs, err)
	}
	if f.ownNetns {
		if err := network.RemoveNamespace(f.netns); err != nil {
			errs = append(errs, err)
		}
	}
	for _, o := range f.owners {
		if err := os.Chown(o.path, o.uid, o.gid); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("give %s back: %w", o.path, err))
		} else if err == nil {
			_ = os.Chmod(o.path, o.mode)
		}
	}
	return errs
}

// fcCgroups are the jailer's cgroup version and settings for a VM of
// memBytes (Firecracker's own memory included) and cpus (0: no quota),
// for the controllers the hierarchy at root offers (on v2 those its
// cgroup.controllers lists, on v1 those mounted under it).
func fcCgroups(root string, memBytes int64, cpus float64) (int, []string) {
	mem := strconv.FormatInt(memBytes, 10)
	quota := strconv.FormatInt(int64(cpus*cfsPeriod), 10)
	if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil {
		have := map[string]bool{}
		for _, c := range strings.Fields(string(b)) {
			have[c] = true
		}
		var out []string
		if have["memory"] {
			out = append(out, "memory.max="+mem)
		}
		if have["cpu"] && cpus > 0 {
			out = append(out, "cpu.max="+quota+" "+strconv.Itoa(cfsPeriod))
		}
		if have["pids"] {
			out = append(out, "pids.max="+strconv.Itoa(qemuPids))
		}
		return 2, out
	}
	var out []string
	mounted := func(c string) bool {
		_, err := os.Stat(filepath.Join(root, c, "cgroup.procs"))
		return err == nil
	}
	if mounted("memory") {
		out = append(out, "memory.limit_in_bytes="+mem)
	}
	if mounted("cpu") && cpus > 0 {
		out = append(out, "cpu.cfs_period_us="+strconv.Itoa(cfsPeriod), "cpu.cfs_quota_us="+quota)
	}
	if mounted("pids") {
		out = append(out, "pids.max="+strconv.Itoa(qemuPids))
	}
	return 1, out
}
