package microvm

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/helmr/helmr/internal/agent/guest"
	"github.com/helmr/helmr/internal/sandbox/network"
)

// Accelerators QEMU runs guests with.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// vmDisk is one virtio-blk disk of a guest: serial names it for the init
// (guest.VMDiskPrefix + name).
type vmDisk struct {
	name     string
	path     string
	readOnly bool
	layer    bool // a root layer's (guestfmt.LayerImage)
}

// vm is what one QEMU invocation needs.
type vm struct {
	qemu      string
	accel     string
	kernel    string // bzImage
	initramfs string
	cmdline   []string // beyond the fixed ones
	memMiB    int64
	cpus      int
	disks     []vmDisk
	// agent and ctl are QEMU's ends of the socketpairs behind the
	// virtio-serial ports of the agent's stream and of the init's control
	// channel, qmp its end of the monitor's; all nil for a probe.
	agent, ctl, qmp *os.File
	// incoming, if set, is a migration stream (a snapshot) QEMU restores
	// the VM from instead of booting it.
	incoming *os.File
	// net, if set, is the guest's end of the sandbox's network wire
	// (network.NewWire): the virtio-net device's frames, one a datagram.
	net *os.File
	// uid and gid QEMU runs as; 0 keeps the caller's.
	uid, gid uint32
}

// command builds QEMU's command line and the files it inherits: every
// host resource reaches QEMU as an open descriptor (kernel and initramfs
// as /dev/fd/N, disks through -add-fd sets, the agent's socket as a
// chardev fd), so QEMU, running as a uid of its own, needs no path on the
// host's file system. The guest's console (ttyS0) is QEMU's stdout.
func (v *vm) command(ctx context.Context) (*exec.Cmd, []*os.File, error) {
	var files []*os.File
	fail := func(err error) (*exec.Cmd, []*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, nil, err
	}
	// fd returns the descriptor number f will have in QEMU.
	fd := func(f *os.File) int {
		files = append(files, f)
		return 2 + len(files)
	}
	kernel, err := os.Open(v.kernel)
	if err != nil {
		return fail(fmt.Errorf("kernel: %w", err))
	}
	kfd := fd(kernel)
	initrd, err := os.Open(v.initramfs)
	if err != nil {
		return fail(fmt.Errorf("initramfs: %w", err))
	}
	ifd := fd(initrd)
	machine := "microvm,acpi=on,pcie=off,isa-serial=on,rtc=on"
	cpu := "max"
	if v.accel == AccelKVM {
		cpu = "host"
	}
	cmdline := append([]string{"console=ttyS0", "quiet", "panic=-1", "reboot=t",
		"tsc_early_khz=" + strconv.FormatInt(tscKHz(), 10),
		"helmr.disks=" + strconv.Itoa(len(v.disks))}, v.cmdline...)
	args := []string{
		"-M", machine, "-accel", v.accel, "-cpu", cpu,
		"-m", strconv.FormatInt(v.memMiB, 10), "-smp", strconv.Itoa(v.cpus),
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		"-chardev", "stdio,id=console,signal=off", "-serial", "chardev:console",
		"-kernel", "/dev/fd/" + strconv.Itoa(kfd), "-initrd", "/dev/fd/" + strconv.Itoa(ifd),
		"-append", strings.Join(cmdline, " "),
		"-device", "virtio-rng-device",
	}
	if v.agent != nil {
		// Port 0 of a virtio-serial device is a console's: the two ports
		// are 1 and 2.
		args = append(args,
			"-device", "virtio-serial-device,max_ports=3",
			"-chardev", "socket,id=agent,fd="+strconv.Itoa(fd(v.agent)),
			"-device", "virtserialport,chardev=agent,name="+guest.VMPort+",nr=1",
			"-chardev", "socket,id=ctl,fd="+strconv.Itoa(fd(v.ctl)),
			"-device", "virtserialport,chardev=ctl,name="+guest.VMCtlPort+",nr=2",
			"-chardev", "socket,id=qmp,fd="+strconv.Itoa(fd(v.qmp)),
			"-mon", "chardev=qmp,mode=control")
	}
	if v.net != nil {
		args = append(args,
			"-netdev", "dgram,id=net0,local.type=fd,local.str="+strconv.Itoa(fd(v.net)),
			"-device", "virtio-net-device,netdev=net0,mac="+network.GuestMAC.String())
	}
	for i, d := range v.disks {
		// QEMU picks a set's descriptor by access mode and opens a
		// writable disk read-only too (while probing it): a writable
		// disk's set holds both.
		modes := []int{os.O_RDONLY}
		if !d.readOnly {
			modes = append(modes, os.O_RDWR)
		}
		set := strconv.Itoa(i + 1)
		for _, mode := range modes {
			f, err := os.OpenFile(d.path, mode, 0)
			if err != nil {
				return fail(fmt.Errorf("disk %s: %w", d.name, err))
			}
			args = append(args, "-add-fd", "fd="+strconv.Itoa(fd(f))+",set="+set)
		}
		// No image locks: each disk reaches only this QEMU, as a
		// descriptor, and QEMU's locks on its own two descriptors of
		// one disk refuse the VM going on after a snapshot (cont).
		drive := "file=/dev/fdset/" + set + ",if=none,id=d" + set + ",format=raw,cache=unsafe,aio=threads,file.locking=off"
		if d.readOnly {
			drive += ",readonly=on"
		}
		args = append(args, "-drive", drive,
			"-device", "virtio-blk-device,drive=d"+set+",serial="+guest.VMDiskPrefix+d.name)
	}
	if v.incoming != nil {
		args = append(args, "-incoming", "fd:"+strconv.Itoa(fd(v.incoming)))
	}
	cmd := exec.CommandContext(ctx, v.qemu, args...)
	cmd.Env = []string{}
	cmd.ExtraFiles = files
	// Namespaces of its own: QEMU reaches everything through the
	// descriptors it inherits, so it needs no network (its interface is
	// a socket it holds), sees no host process (PID 1 of its own), and
	// mounts, IPC and host name are its own.
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true,
		Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS}
	if v.uid != 0 {
		attr.Credential = &syscall.Credential{Uid: v.uid, Gid: v.gid, Groups: []uint32{}}
	}
	cmd.SysProcAttr = attr
	return cmd, files, nil
}

// tscKHz is the host's TSC frequency in kHz from /proc/cpuinfo: under TCG
// the guest's TSC ticks at the host's rate, and the guest kernel, which
// cannot calibrate it against emulated timers quickly, takes it from
// tsc_early_khz.
func tscKHz() int64 {
	f, err := os.Open("/proc/cpuinfo")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "cpu MHz" {
				if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && mhz > 0 {
					return int64(math.Round(mhz * 1000))
				}
			}
		}
	}
	return 2000000
}

// probeKVM boots the guest kernel under KVM with the probe argument and
// reports whether its init ran: /dev/kvm may exist and still not run a
// stock kernel (a nested PVM hypervisor boots only PVM guest kernels).
func probeKVM(qemu, kernel, initramfs string) (bool, string) {
	present, pvm := KVMPresent()
	if !present {
		return false, "no /dev/kvm"
	}
	hv := ""
	if pvm {
		hv = " (a PVM hypervisor: it boots only PVM guest kernels)"
	}
	ok, why := ProbeBoot(qemu, AccelKVM, kernel, initramfs)
	if ok {
		return true, "/dev/kvm boots the guest kernel"
	}
	return false, "/dev/kvm does not boot a stock kernel" + hv + ": " + why
}

// ProbeBoot boots kernel with initramfs (the tier's: helmr-agent as init)
// under accel with the probe argument, and reports whether the init
// answered before powering the VM off, or why not.
func ProbeBoot(qemu, accel, kernel, initramfs string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v := &vm{qemu: qemu, accel: accel, kernel: kernel, initramfs: initramfs,
		cmdline: []string{guest.VMProbeArg}, memMiB: 256, cpus: 1}
	cmd, files, err := v.command(ctx)
	if err != nil {
		return false, err.Error()
	}
	out, err := cmd.CombinedOutput()
	for _, f := range files {
		f.Close()
	}
	if strings.Contains(string(out), guest.VMProbeOK) {
		return true, ""
	}
	last := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	if ctx.Err() != nil {
		return false, "no answer in 20s"
	}
	return false, fmt.Sprintf("%v: %s", err, last)
}

// QEMUVersion is the first line `qemu --version` prints ("QEMU emulator
// version 7.2.22 (...)").
func QEMUVersion(qemu string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, qemu, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", qemu, err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line, nil
}

// KVMPresent reports whether /dev/kvm is here and whether its hypervisor
// is PVM (kvm_pvm loaded), which boots only PVM guest kernels.
func KVMPresent() (present, pvm bool) {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return false, false
	}
	_, err := os.Stat("/sys/module/kvm_pvm")
	return true, err == nil
}
