package microvm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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
	"sync/atomic"
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
	qmpTimeout     = 30 * time.Second
)

// helmrDiskSize is the least size of the /opt/helmr disk: one size for
// every sandbox, so that they share boot snapshots (see machine).
const helmrDiskSize = 64 << 20

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
	qmp     *qmp  // QEMU's monitor (nil under Firecracker)
	fc      *fcVM // Firecracker's jail and API, under Firecracker

	// The agent's stream and the guest init's control channel: set before
	// QEMU starts, after Firecracker has (setStreams); read by the VMM's
	// watcher under streamsMu, by everything else once Start returned.
	streamsMu sync.Mutex
	client    *agent.Client
	ctl       *ctlConn

	ws       *workspace
	link     *network.Link // the sandbox's network, if its spec has one
	machine  machine       // the VM's shape, as QEMU runs it
	ready    bool          // the agent answered (set before Start returns)
	fromBoot bool          // started from a boot snapshot
	// checkpointing: the VM is being saved, and its agent's stream ends
	// as sandbox.ErrCheckpointed, not as a lost guest.
	checkpointing atomic.Bool

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

// start makes the disks and starts the VM: restored from the boot
// snapshot of its machine's shape if there is one, else booted (and, at
// its idle moment, snapshotted for the next sandboxes of that shape).
// Then it tells the guest's init to set the sandbox up and waits for the
// agent.
func (s *Sandbox) start(ctx context.Context) error {
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	disks, err := s.makeDisks()
	if err != nil {
		return err
	}
	s.machine, err = s.rt.shape(s.spec, disks)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	snap := s.rt.boots.lookup(s.machine)
	s.fromBoot = snap != nil
	if s.rt.vmm == VMMFirecracker {
		if err := s.startFirecracker(ctx, disks); err != nil {
			return err
		}
		if err := s.ctl.wait(ctx, guest.VMCtlIdle); err != nil {
			return fmt.Errorf("%w; console: %s", err, s.console.last())
		}
	} else if snap != nil {
		err = s.launch(disks, snap)
		snap.Close()
		if err == nil {
			err = s.qmp.waitIncoming(ctx)
		}
		if err != nil {
			return fmt.Errorf("restore the boot snapshot: %w; console: %s", err, s.console.last())
		}
	} else {
		if err := s.launch(disks, nil); err != nil {
			return err
		}
		if err := s.ctl.wait(ctx, guest.VMCtlIdle); err != nil {
			return fmt.Errorf("%w; console: %s", err, s.console.last())
		}
		if err := s.rt.boots.save(ctx, s.machine, s.qmp); err != nil {
			return err
		}
	}
	if err := s.sendStart(); err != nil {
		return err
	}
	init := &agent.Init{
		StateDir:        guest.VMStateDir,
		RootSize:        s.spec.RootSizeBytes,
		Workspace:       s.spec.Workspace,
		WorkspaceSource: filepath.Join(guest.VMDisksDir, guest.VMWorkspaceDisk),
		Hostname:        s.spec.Hostname,
		DNS:             s.spec.DNS,
		// Every guest of a boot snapshot is one machine to its kernel:
		// each sandbox is told an id of its own.
		MachineID: newMachineID(),
		// The host cannot add to /opt/helmr's disk once it is made: late
		// files (a run's task) come through the agent (Traits.DiskGuest).
		HelmrWritable: true,
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
	s.ready = true
	s.log.Debug("sandbox ready", "agent_version", version, "accel", s.rt.accel, "from_snapshot", s.fromBoot)
	return nil
}

// newMachineID is a random machine id (machine-id(5): 128 bits, hex).
func newMachineID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sendStart tells the guest's init to set the sandbox up: its limits,
// workspace owner and network, with a fresh clock and seed.
func (s *Sandbox) sendStart() error {
	boot := guest.VMBoot{Memory: sandboxMemory(s.spec), Pids: s.spec.PidsLimit, MilliCPUs: int64(s.spec.CPU * 1000)}
	if s.spec.WorkspaceImage != "" {
		// The init gives the image's tree to the sandbox's user, as
		// newWorkspace does to a directory.
		boot.WorkspaceOwner = &[2]uint32{s.spec.UID, s.spec.GID}
	}
	if s.machine.Net {
		boot.Net = guestNet()
	}
	f, err := fresh(s.rt.now())
	if err != nil {
		return err
	}
	return s.ctl.send(guest.VMCtl{Type: guest.VMCtlStart, Start: &guest.VMStart{Boot: boot, Fresh: f}})
}

// guestNet is the guest's interface on a VM wire or TAP (network.NewWire,
// network.NewVMTap).
func guestNet() *guest.VMNet {
	return &guest.VMNet{Addr: netip.PrefixFrom(network.GuestAddr, network.Subnet.Bits()),
		Gateway: network.Gateway, GatewayMAC: network.GatewayMAC, Neighbours: []netip.Addr{network.Gateway, network.DNSAddr},
		MTU: network.WireMTU}
}

// sandboxMemory is the sandbox's memory: the spec's, at least MinMemory.
func sandboxMemory(spec sandbox.Spec) int64 {
	mem := spec.MemoryBytes
	if mem == 0 {
		mem = DefaultMemory
	}
	return max(mem, MinMemory)
}

// makeDisks gives the guest its layers, /opt/helmr and workspace.
func (s *Sandbox) makeDisks() ([]vmDisk, error) {
	disks, err := s.layerDisks()
	if err != nil {
		return nil, err
	}
	if s.spec.HelmrHost != "" {
		img := filepath.Join(s.dir, "helmr.ext4")
		if err := guestfmt.DirImage(img, s.spec.HelmrHost, helmrDiskSize, &[2]int{0, 0}); err != nil {
			return nil, err
		}
		disks = append(disks, vmDisk{name: "helmr", path: img, readOnly: true})
	}
	if s.spec.WorkspaceImage != "" {
		return append(disks, vmDisk{name: guest.VMWorkspaceDisk, path: s.spec.WorkspaceImage}), nil
	}
	ws, err := newWorkspace(s.spec, filepath.Join(s.dir, "workspace.ext4"), s.rt.cfg.WorkspaceSize)
	if err != nil {
		return nil, err
	}
	s.ws = ws
	return append(disks, vmDisk{name: guest.VMWorkspaceDisk, path: ws.image}), nil
}

// layerDisks are the read-only disks of the spec's root layers.
func (s *Sandbox) layerDisks() ([]vmDisk, error) {
	var disks []vmDisk
	for i, l := range s.spec.RootLayers {
		img, err := guestfmt.LayerImage(s.rt.cfg.layers(), l)
		if err != nil {
			return nil, err
		}
		disks = append(disks, vmDisk{name: "layer" + strconv.Itoa(i), path: img, readOnly: true, layer: true})
	}
	return disks, nil
}

// launch starts QEMU in the sandbox's cgroup with the machine's shape,
// the disks, the agent's and the control channel's ports and the
// monitor; incoming, if set, is a snapshot to restore instead of booting.
func (s *Sandbox) launch(disks []vmDisk, incoming *os.File) error {
	m := s.machine
	cg, err := newCgroup(s.rt.cfg.CgroupRoot, s.rt.cfg.CgroupParent, s.spec.ID, m.MemMiB<<20, s.spec.CPU)
	if err != nil {
		s.log.Warn("no cgroup for qemu", "err", err)
	}
	s.cg = cg
	var theirs []*os.File
	defer func() {
		for _, f := range theirs {
			f.Close() // QEMU holds its own copies once started
		}
	}()
	pair := func(name string) (*os.File, error) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("%s socketpair: %w", name, err)
		}
		theirs = append(theirs, os.NewFile(uintptr(fds[1]), name))
		return os.NewFile(uintptr(fds[0]), name), nil
	}
	ours := make([]*os.File, 3)
	for i, name := range []string{"agent", "ctl", "qmp"} {
		if ours[i], err = pair(name); err != nil {
			for _, f := range ours[:i] {
				f.Close()
			}
			return err
		}
	}
	agentConn, err := net.FileConn(ours[0])
	ours[0].Close()
	if err != nil {
		ours[1].Close()
		ours[2].Close()
		return fmt.Errorf("agent stream: %w", err)
	}
	ctl, err := newCtlConn(ours[1])
	ours[1].Close()
	if err != nil {
		agentConn.Close()
		ours[2].Close()
		return err
	}
	s.setStreams(agent.NewClient(agentConn, s.log), ctl)
	var wire *os.File
	if m.Net {
		link, w, err := network.NewWire(s.spec.ID, s.spec.Network)
		if err != nil {
			ours[2].Close()
			return err
		}
		s.link, wire = link, w
		theirs = append(theirs, wire)
	}
	v := s.rt.vm(m, disks)
	v.agent, v.ctl, v.qmp, v.net, v.incoming = theirs[0], theirs[1], theirs[2], wire, incoming
	if err := s.startQEMU(v); err != nil {
		ours[2].Close()
		return err
	}
	qctx, cancel := context.WithTimeout(context.Background(), qmpTimeout)
	defer cancel()
	s.qmp, err = newQMP(qctx, ours[2])
	ours[2].Close()
	if err != nil {
		return fmt.Errorf("%w: %w; console: %s", sandbox.ErrGuestRuntime, err, s.console.last())
	}
	return nil
}

// startQEMU starts QEMU as v says, its console into the sandbox's log.
func (s *Sandbox) startQEMU(v *vm) error {
	// QEMU's life is the sandbox's, not the request's: only Destroy ends it.
	cmd, files, err := v.command(context.Background())
	if err != nil {
		return err
	}
	defer func() {
		for _, f := range files {
			if f != v.agent && f != v.ctl && f != v.qmp && f != v.net && f != v.incoming {
				f.Close()
			}
		}
	}()
	return s.startVMM(cmd, "qemu")
}

// startVMM starts cmd, a VMM whose output is the guest's console, and
// watches it.
func (s *Sandbox) startVMM(cmd *exec.Cmd, what string) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("console pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("start %s: %w", what, err)
	}
	pw.Close()
	s.watch(cmd, pr)
	return nil
}

// watch keeps the started VMM process cmd: its console (read from pr)
// into the sandbox's log, and its exit, which ends the agent's stream
// and the control channel.
func (s *Sandbox) watch(cmd *exec.Cmd, pr *os.File) {
	s.proc = cmd
	if s.cg != nil {
		if err := s.cg.add(cmd.Process.Pid); err != nil {
			s.log.Warn("vmm outside its cgroup", "err", err)
		}
	}
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
		c, ctl := s.streams()
		if c != nil {
			// The stream ends with the VMM: say why, for Execs still running.
			if !s.checkpointing.Load() {
				c.EndAs(fmt.Errorf("%w: %s exited (%v); console: %s", sandbox.ErrGuestRuntime, s.rt.vmm, err, s.console.last()))
			}
			_ = c.Close()
		}
		if ctl != nil {
			_ = ctl.close()
		}
		close(s.exited)
	}()
}

// setStreams sets the agent's client and the control channel.
func (s *Sandbox) setStreams(c *agent.Client, ctl *ctlConn) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	s.client, s.ctl = c, ctl
}

func (s *Sandbox) streams() (*agent.Client, *ctlConn) {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	return s.client, s.ctl
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
	if lost := s.lost(err); lost != nil {
		return st, lost
	}
	return st, err
}

// alive returns an error wrapping ErrGuestRuntime once QEMU has exited.
func (s *Sandbox) alive() error {
	if c, _ := s.streams(); c == nil || s.exited == nil {
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

// Destroy implements sandbox.Sandbox: QEMU is killed and waited for, the
// workspace copied back to the host directory, the sandbox's directory and
// cgroup removed.
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
		// still settles what the guest's kernel holds before QEMU dies.
		// Only an agent that serves answers; one that does not answer in
		// time is not waited for (killing QEMU ends the Exec).
		if s.ready && s.alive() == nil {
			synced := make(chan struct{})
			go func() {
				defer close(synced)
				sctx, scancel := context.WithTimeout(ctx, syncTimeout)
				defer scancel()
				_, _ = s.client.Exec(sctx, sandbox.ExecRequest{Argv: []string{"sync"}}, 0, 0)
			}()
			select {
			case <-synced:
			case <-time.After(syncTimeout):
			}
		}
		_ = s.proc.Process.Kill()
		select {
		case <-s.exited:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("wait for %s: %w", s.rt.vmm, ctx.Err()))
		}
	} else {
		c, ctl := s.streams()
		if c != nil {
			_ = c.Close()
		}
		if ctl != nil {
			_ = ctl.close()
		}
	}
	if s.qmp != nil {
		_ = s.qmp.close()
	}
	if s.fc != nil {
		errs = append(errs, s.fc.cleanup()...)
	}
	if s.ws != nil {
		if err := s.ws.copyBack(s.dir); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.settleWorkspaceImage(); err != nil {
		errs = append(errs, err)
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
