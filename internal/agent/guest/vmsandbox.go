package guest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// VMSandboxMode is the helmr-agent mode the VM's init starts the
// sandbox's agent in (RunVMSandbox), with the worker's stream on fd 3.
const VMSandboxMode = "vmsandbox"

// vmCgroupDir is the sandbox's cgroup in the guest.
const (
	vmCgroupRoot = "/sys/fs/cgroup"
	vmCgroupDir  = vmCgroupRoot + "/sandbox"
	cfsPeriod    = 100000
)

// VMBoot is the sandbox's shape inside the VM, which the host sends the
// guest's init in VMStart: the limits, enforced by the guest's kernel on
// a cgroup holding the sandbox's agent and everything it starts (memory
// in bytes, processes (threads count), CPU in thousandths of a CPU; zero
// is no limit), the workspace's owner and the network.
type VMBoot struct {
	Memory    int64 `json:"memory,omitempty"`
	Pids      int64 `json:"pids,omitempty"`
	MilliCPUs int64 `json:"milli_cpus,omitempty"`
	// WorkspaceOwner, if set, is the uid and gid the init gives the
	// workspace disk's tree to before the sandbox starts.
	WorkspaceOwner *[2]uint32 `json:"workspace_owner,omitempty"`
	// Net, if set, is the sandbox's network interface.
	Net *VMNet `json:"net,omitempty"`
}

// chownWorkspace gives the workspace disk's tree to owner (symlinks
// themselves, not their targets).
func chownWorkspace(owner [2]uint32) error {
	root := filepath.Join(VMDisksDir, VMWorkspaceDisk)
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(owner[0]), int(owner[1]))
	})
	if err != nil {
		return fmt.Errorf("vm init: workspace owner: %w", err)
	}
	return nil
}

// vmCgroup mounts cgroup2, makes the sandbox's cgroup and returns it
// open, for the sandbox's agent to start in (CLONE_INTO_CGROUP: no moment
// outside it). vmLimits sets its limits later.
func vmCgroup() (*os.File, error) {
	if err := unix.Mount("cgroup2", vmCgroupRoot, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("vm init: mount cgroup2: %w", err)
	}
	if err := os.WriteFile(filepath.Join(vmCgroupRoot, "cgroup.subtree_control"), []byte("+memory +pids +cpu"), 0); err != nil {
		return nil, fmt.Errorf("vm init: enable cgroup controllers: %w", err)
	}
	if err := os.Mkdir(vmCgroupDir, 0o755); err != nil {
		return nil, fmt.Errorf("vm init: sandbox cgroup: %w", err)
	}
	f, err := os.Open(vmCgroupDir)
	if err != nil {
		return nil, fmt.Errorf("vm init: sandbox cgroup: %w", err)
	}
	return f, nil
}

// vmLimits sets l's limits on the sandbox's cgroup. The guest's kernel
// kills a process of the cgroup past its memory (and logs "Killed
// process" on the console, which the host reads: sandbox.Stats.OOMKilled),
// refuses forks past its pids and throttles it to its CPU share.
func vmLimits(l VMBoot) error {
	files := map[string]string{"memory.swap.max": "0"}
	if l.Memory > 0 {
		files["memory.max"] = strconv.FormatInt(l.Memory, 10)
	}
	if l.Pids > 0 {
		files["pids.max"] = strconv.FormatInt(l.Pids, 10)
	}
	if l.MilliCPUs > 0 {
		files["cpu.max"] = strconv.FormatInt(l.MilliCPUs*cfsPeriod/1000, 10) + " " + strconv.Itoa(cfsPeriod)
	}
	for name, v := range files {
		err := os.WriteFile(filepath.Join(vmCgroupDir, name), []byte(v), 0)
		if err != nil && !(name == "memory.swap.max" && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("vm init: sandbox cgroup %s: %w", name, err)
		}
	}
	return nil
}

// vmGoAheadFD is the sandbox's agent's end of a socketpair with the
// init: the agent writes one byte once it waits (set up as far as it can
// be before the sandbox is known), then reads the init's go-ahead (one
// byte; end of file: stop).
const vmGoAheadFD = 4

// startSandboxAgent starts this binary in VMSandboxMode in cg, in fresh
// PID, mount, UTS and IPC namespaces, with port as its stream and one end
// of the go-ahead socketpair (vmGoAheadFD), and returns once the agent
// waits on it: goAhead is the init's end; done yields how the agent
// ended. In its PID namespace the sandbox's agent
// is PID 1 and its /proc shows the sandbox's processes only, not the
// kernel's threads nor this init.
func startSandboxAgent(port *os.File, cg *os.File, log *slog.Logger) (done <-chan error, goAhead *os.File, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("vm init: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("vm init: %w", err)
	}
	w, r := os.NewFile(uintptr(fds[0]), "go-ahead"), os.NewFile(uintptr(fds[1]), "go-ahead")
	defer r.Close()
	p, err := os.StartProcess(self, []string{"helmr-agent", VMSandboxMode}, &os.ProcAttr{
		Env:   []string{},
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, port, r},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC,
			UseCgroupFD: true,
			CgroupFD:    int(cg.Fd()),
		},
	})
	if err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("vm init: start the sandbox's agent: %w", err)
	}
	ch := make(chan error, 1)
	go func() {
		st, err := p.Wait()
		if err == nil && !st.Success() {
			err = errors.New(st.String())
		}
		log.Info("sandbox agent ended", "err", err)
		ch <- err
	}()
	r.Close()
	if _, err := io.ReadFull(w, make([]byte, 1)); err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("vm init: the sandbox's agent did not start: %w", err)
	}
	return ch, w, nil
}

// waitGoAhead limits what the agent starts (LimitExec: slow under TCG,
// with every thread stopped per call, so done before the idle moment),
// blocks until the init lets the sandbox's agent go on (its disks
// mounted, its limits set), then makes the agent's mounts private for
// Setup to pivot (Prepare's other half).
func waitGoAhead() error {
	if err := LimitExec(); err != nil {
		return err
	}
	f := os.NewFile(vmGoAheadFD, "go-ahead")
	defer f.Close()
	if _, err := f.Write([]byte{1}); err != nil {
		return fmt.Errorf("vm sandbox: tell the init: %w", err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(f, b); err != nil {
		return fmt.Errorf("vm sandbox: no go-ahead from the init: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	return nil
}

// RunVMSandbox is the sandbox's agent in a VM (VMSandboxMode), started by
// the VM's init in the sandbox's namespaces and cgroup: the process tier's
// agent (RunInit with Prepare) on stream, with maskProc after Setup. Its
// threads are reserved up front: they count in the cgroup's pids limit.
func RunVMSandbox(stream io.ReadWriteCloser, log *slog.Logger) error {
	ReserveThreads(ReservedThreads)
	return runInit(stream, waitGoAhead, maskProc, log)
}

// vmReadOnlyProc are the /proc files through which the guest's uid 0
// would reach its kernel (sysctls, sysrq, irq affinity, bus and fs
// settings): the process tier's user namespace keeps them the host's;
// in a VM they are bound read-only over themselves, as container
// runtimes do.
var vmReadOnlyProc = []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"}

// maskProc makes vmReadOnlyProc read-only in the sandbox's /proc.
func maskProc() error {
	for _, p := range vmReadOnlyProc {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err := bind(p, p, true); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	return nil
}
