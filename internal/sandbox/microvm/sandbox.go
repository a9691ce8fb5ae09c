package microvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent"
	"github.com/helmr/helmr/internal/agent/guest"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/microvm/guestfmt"
	"github.com/helmr/helmr/internal/sandbox/network"
)

// Timeouts: for the guest to boot and its agent to answer (TCG boots in
// seconds, more on a loaded host), and for QEMU to die once killed.
const (
	startupTimeout = 120 * time.Second
	destroyTimeout = 10 * time.Second
	syncTimeout    = 3 * time.Second
)

// Sandbox is a running microVM.
type Sandbox struct {
	rt   *Runtime
	spec sandbox.Spec
	log  *slog.Logger
	dir  string // StateDir/sandboxes/<id>

	cg      *cgroup
	proc    *exec.Cmd     // the VMM: QEMU, or the jailer exec'd into Firecracker
	exited  chan struct{} // closed once proc has been waited for
	exitErr error         // proc's exit, once exited is closed
	console *consoleLog
	ws      *workspace
	link    *network.Link // the sandbox's network, if its spec has one
	fc      *fcVM         // Firecracker's jail and API, under Firecracker

	clientMu sync.Mutex // the client is set after the VMM starts under Firecracker
	client   *agent.Client

	destroyOnce sync.Once
	destroyErr  error
}

var (
	_ sandbox.Sandbox = (*Sandbox)(nil)
	_ sandbox.Shells  = (*Sandbox)(nil)
)

func newSandbox(r *Runtime, spec sandbox.Spec) *Sandbox {
	return &Sandbox{
		rt:   r,
		spec: spec,
		log:  r.log.With("sandbox_id", spec.ID),
		dir:  filepath.Join(r.cfg.sandboxes(), spec.ID),
	}
}

// start makes the disks, boots the VMM and waits for the agent.
func (s *Sandbox) start(ctx context.Context) error {
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	disks, err := s.makeDisks()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	if s.rt.vmm == VMMFirecracker {
		err = s.startFirecracker(ctx, disks)
	} else {
		err = s.bootQEMU(disks)
	}
	if err != nil {
		return err
	}
	init := &agent.Init{
		StateDir:        guest.VMStateDir,
		RootSize:        s.spec.RootSizeBytes,
		Workspace:       s.spec.Workspace,
		WorkspaceSource: filepath.Join(guest.VMDisksDir, guest.VMWorkspaceDisk),
		Hostname:        s.spec.Hostname,
		DNS:             s.spec.DNS,
	}
	for i := range s.spec.RootLayers {
		init.RootLayers = append(init.RootLayers, filepath.Join(guest.VMDisksDir, "layer"+strconv.Itoa(i)))
	}
	if s.spec.HelmrHost != "" {
		init.HelmrSource = filepath.Join(guest.VMDisksDir, "helmr")
	}
	if err := s.client.SendInit(init, nil); err != nil {
		return err
	}
	version, err := s.client.WaitReady(ctx)
	if err != nil {
		return fmt.Errorf("%w; console: %s", err, s.console.last())
	}
	s.log.Debug("sandbox ready", "agent_version", version, "accel", s.rt.accel)
	return nil
}

// makeDisks gives the guest its layers, /opt/helmr and workspace.
func (s *Sandbox) makeDisks() ([]vmDisk, error) {
	var disks []vmDisk
	for i, l := range s.spec.RootLayers {
		img, err := guestfmt.LayerImage(s.rt.cfg.layers(), l)
		if err != nil {
			return nil, err
		}
		disks = append(disks, vmDisk{name: "layer" + strconv.Itoa(i), path: img, readOnly: true})
	}
	if s.spec.HelmrHost != "" {
		img := filepath.Join(s.dir, "helmr.ext4")
		if err := guestfmt.DirImage(img, s.spec.HelmrHost, 0, &[2]int{0, 0}); err != nil {
			return nil, err
		}
		disks = append(disks, vmDisk{name: "helmr", path: img, readOnly: true})
	}
	if s.spec.WorkspaceImage != "" {
		// The guest's init gives the image's tree to the sandbox's user
		// (owner, below), as newWorkspace does to a directory.
		return append(disks, vmDisk{name: guest.VMWorkspaceDisk, path: s.spec.WorkspaceImage}), nil
	}
	ws, err := newWorkspace(s.spec, filepath.Join(s.dir, "workspace.ext4"), s.rt.cfg.WorkspaceSize)
	if err != nil {
		return nil, err
	}
	s.ws = ws
	return append(disks, vmDisk{name: guest.VMWorkspaceDisk, path: ws.image}), nil
}

// bootQEMU starts QEMU with the agent's stream as its virtio-serial
// port's socket. QEMU's uid needs no access to the images: it gets them
// as open descriptors (see vm.command).
func (s *Sandbox) bootQEMU(disks []vmDisk) error {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("agent socketpair: %w", err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "agent-stream")
	ours := os.NewFile(uintptr(fds[0]), "agent-stream")
	conn, err := net.FileConn(ours)
	_ = ours.Close()
	if err != nil {
		theirs.Close()
		return fmt.Errorf("agent stream: %w", err)
	}
	s.setClient(agent.NewClient(conn, s.log))
	err = s.startQEMU(disks, theirs)
	theirs.Close()
	return err
}

// guestSize is the guest's memory (the sandbox's, at least MinMemory;
// the VM gets guestMemOverhead more) and vCPUs.
func (s *Sandbox) guestSize() (mem int64, cpus int) {
	mem = s.spec.MemoryBytes
	if mem == 0 {
		mem = DefaultMemory
	}
	mem = max(mem, MinMemory)
	cpus = 1
	if s.spec.CPU > 1 {
		cpus = int(s.spec.CPU + 0.999)
	}
	return mem, cpus
}

// vmBoot is what the guest's init is told on the command line: the
// sandbox's limits and workspace owner (the interface is the caller's).
func (s *Sandbox) vmBoot(mem int64) guest.VMBoot {
	boot := guest.VMBoot{Memory: mem, Pids: s.spec.PidsLimit, MilliCPUs: int64(s.spec.CPU * 1000),
		WorkspaceOwner: &[2]uint32{s.spec.UID, s.spec.GID}}
	if s.spec.WorkspaceImage == "" {
		boot.WorkspaceOwner = nil // newWorkspace made the image so
	}
	return boot
}

// guestNet is the guest's interface on a VM wire or TAP (network.NewWire,
// network.NewVMTap).
func guestNet() *guest.VMNet {
	return &guest.VMNet{Addr: netip.PrefixFrom(network.GuestAddr, network.Subnet.Bits()),
		Gateway: network.Gateway, GatewayMAC: network.GatewayMAC, Neighbours: []netip.Addr{network.Gateway, network.DNSAddr},
		MTU: network.WireMTU}
}

// startQEMU starts QEMU in the sandbox's cgroup with agent as the
// virtio-serial port's socket.
func (s *Sandbox) startQEMU(disks []vmDisk, agentEnd *os.File) error {
	mem, cpus := s.guestSize()
	cg, err := newCgroup(s.rt.cfg.CgroupRoot, s.rt.cfg.CgroupParent, s.spec.ID, mem+guestMemOverhead, s.spec.CPU)
	if err != nil {
		s.log.Warn("no cgroup for qemu", "err", err)
	}
	s.cg = cg
	boot := s.vmBoot(mem)
	var wire *os.File
	if s.spec.Network.Attaches() {
		link, w, err := network.NewWire(s.spec.ID, s.spec.Network)
		if err != nil {
			return err
		}
		s.link, wire = link, w
		defer wire.Close() // QEMU holds its own copy once started
		boot.Net = guestNet()
	}
	v := &vm{
		qemu: s.rt.cfg.QEMUPath, accel: s.rt.accel, kernel: s.rt.cfg.Kernel.Bzimage,
		initramfs: s.rt.initramfs, memMiB: (mem + guestMemOverhead) >> 20, cpus: cpus, disks: disks,
		cmdline: boot.Args(), agent: agentEnd, net: wire, uid: s.rt.cfg.UID, gid: s.rt.cfg.GID,
	}
	// QEMU's life is the sandbox's, not the request's: only Destroy ends it.
	cmd, files, err := v.command(context.Background())
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range files {
			if f != agentEnd && f != wire {
				f.Close()
			}
		}
	}()
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("console pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("start qemu: %w", err)
	}
	pw.Close()
	if s.cg != nil {
		if err := s.cg.add(cmd.Process.Pid); err != nil {
			s.log.Warn("qemu outside its cgroup", "err", err)
		}
	}
	s.watch(cmd, pr)
	return nil
}

// watch keeps the started VMM process cmd: its console (read from pr)
// into the sandbox's log, and its exit, which ends the agent's stream.
func (s *Sandbox) watch(cmd *exec.Cmd, pr *os.File) {
	s.proc = cmd
	s.console = newConsoleLog(s.log, filepath.Join(s.dir, "console.log"))
	s.exited = make(chan struct{})
	logged := make(chan struct{})
	go func() {
		defer close(logged)
		defer pr.Close()
		_, _ = io.Copy(s.console, pr)
	}()
	go func() {
		err := cmd.Wait()
		<-logged
		s.exitErr = err
		// The stream ends with the VMM: say why, for Execs still running.
		if c := s.agentClient(); c != nil {
			c.EndAs(fmt.Errorf("%w: %s exited (%v); console: %s", sandbox.ErrGuestRuntime, s.rt.vmm, err, s.console.last()))
			_ = c.Close()
		}
		close(s.exited)
	}()
}

func (s *Sandbox) setClient(c *agent.Client) {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	s.client = c
}

func (s *Sandbox) agentClient() *agent.Client {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	return s.client
}

// Exec implements sandbox.Sandbox.
func (s *Sandbox) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	if err := s.alive(); err != nil {
		return sandbox.ExitStatus{}, err
	}
	if req.Cwd == "" {
		req.Cwd = s.spec.Workspace
	}
	st, err := s.client.Exec(ctx, req, s.spec.UID, s.spec.GID)
	if err != nil && !errors.Is(err, sandbox.ErrGuestRuntime) && s.alive() != nil {
		return st, fmt.Errorf("%w: %w", s.alive(), err)
	}
	return st, err
}

// alive returns an error wrapping ErrGuestRuntime once QEMU has exited.
func (s *Sandbox) alive() error {
	if s.agentClient() == nil || s.exited == nil {
		return fmt.Errorf("%w: sandbox %s has no agent", sandbox.ErrGuestRuntime, s.spec.ID)
	}
	select {
	case <-s.exited:
		return fmt.Errorf("%w: sandbox %s: %s exited (%v); console: %s", sandbox.ErrGuestRuntime, s.spec.ID, s.rt.vmm, s.exitErr, s.console.last())
	default:
		return nil
	}
}

// WriteFile implements sandbox.Sandbox through the agent.
func (s *Sandbox) WriteFile(ctx context.Context, f sandbox.File) error {
	if err := s.alive(); err != nil {
		return err
	}
	return s.client.PlaceFile(ctx, f)
}

// Shell implements sandbox.Shells: the guest's agent holds the sessions.
// An open without a Cwd starts in the workspace.
func (s *Sandbox) Shell(ctx context.Context, req sandbox.ShellRequest) (sandbox.ShellResult, error) {
	if err := s.alive(); err != nil {
		return sandbox.ShellResult{}, err
	}
	if req.Op == sandbox.ShellOpen && req.Cwd == "" {
		req.Cwd = s.spec.Workspace
	}
	return s.client.Shell(ctx, req)
}

// Stats implements sandbox.Sandbox. The guest's kernel enforces the
// limits on the sandbox's cgroup inside the VM; of what it does, the host
// learns only the OOM kills, which the kernel logs on the console (see
// consoleLog). A refused fork is not reported (PidsLimitHit stays false)
// and CPU time is the guest's own account.
func (s *Sandbox) Stats() sandbox.Stats {
	return sandbox.Stats{OOMKilled: s.console.oomKilled()}
}

// Destroy implements sandbox.Sandbox: the VMM is killed and waited for,
// the workspace copied back to the host directory, the sandbox's
// directory and cgroup (and under Firecracker its jail) removed.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.destroyOnce.Do(func() { s.destroyErr = s.destroy(ctx) })
	return s.destroyErr
}

func (s *Sandbox) destroy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, destroyTimeout)
	defer cancel()
	var errs []error
	if s.proc != nil {
		// The workspace is mounted synchronous in the guest; a sync first
		// still settles what the guest's kernel holds before the VMM dies.
		if s.alive() == nil {
			sctx, scancel := context.WithTimeout(ctx, syncTimeout)
			_, _ = s.client.Exec(sctx, sandbox.ExecRequest{Argv: []string{"sync"}}, 0, 0)
			scancel()
		}
		_ = s.proc.Process.Kill()
		select {
		case <-s.exited:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("wait for %s: %w", s.rt.vmm, ctx.Err()))
		}
	} else if c := s.agentClient(); c != nil {
		_ = c.Close()
	}
	if s.fc != nil {
		errs = append(errs, s.fc.cleanup()...)
	}
	if s.ws != nil {
		if err := s.ws.copyBack(s.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if s.link != nil {
		if err := s.link.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.cg != nil {
		if err := s.cg.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", s.spec.ID, err)
	}
	return nil
}

// consoleLog keeps the guest's console in a file and its last lines for
// error messages, and logs each line at debug level.
type consoleLog struct {
	log  *slog.Logger
	file *os.File
	line []byte

	mu   sync.Mutex
	tail []string
	oom  bool
}

// oomKillLine matches the line the guest's kernel logs (at error level,
// printed on a quiet console, with its timestamp) for every process the
// OOM killer ends: "[   12.345678] Memory cgroup out of memory: Killed
// process N (node) ..." ("Out of memory: ..." when the guest as a whole
// ran out). Only the kernel and the guest's agents write to the console
// (the sandbox's processes have no console device), and the agents' log
// lines start with "time=" and quote what a task chose.
var oomKillLine = regexp.MustCompile(`^\[ *[0-9]+\.[0-9]+\] (Memory cgroup out|Out) of memory: Killed process `)

// oomKilled reports whether the guest's kernel has OOM-killed a process.
func (c *consoleLog) oomKilled() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.oom
}

func newConsoleLog(log *slog.Logger, path string) *consoleLog {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		log.Warn("console log", "err", err)
	}
	return &consoleLog{log: log, file: f}
}

func (c *consoleLog) Write(p []byte) (int, error) {
	if c.file != nil {
		_, _ = c.file.Write(p)
	}
	for _, b := range p {
		if b != '\n' {
			if len(c.line) < 4<<10 && b != '\r' {
				c.line = append(c.line, b)
			}
			continue
		}
		c.log.Debug("guest console", "line", string(c.line))
		c.mu.Lock()
		if oomKillLine.Match(c.line) {
			c.oom = true
		}
		c.tail = append(c.tail, string(c.line))
		if len(c.tail) > 8 {
			c.tail = c.tail[1:]
		}
		c.mu.Unlock()
		c.line = c.line[:0]
	}
	return len(p), nil
}

// last is the console's last lines.
func (c *consoleLog) last() string {
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.tail, "; ")
}
