package guest

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The VM's init and the host talk on a control channel of their own (the
// virtio-serial port VMCtlPort), one JSON object (VMCtl) a line, apart
// from the agent's stream:
//
//	guest: idle     devices up, drivers loaded, nothing mounted yet: the
//	                moment the host may save a boot snapshot of the VM
//	host:  start    set the sandbox up as Start says (the disks mounted,
//	                the limits, the network), with a fresh clock and seed
//	guest: error    start failed (then the VM powers off)
//	host:  resume   the VM was restored from a snapshot of a running
//	                sandbox: take the host's clock and a fresh seed
//	guest: resumed  done
//
// Everything that makes a sandbox what it is travels in start, after the
// idle moment, so one snapshot of an idle guest serves every sandbox of
// its size: each restore gets its own disks, limits, clock and entropy.
const (
	VMCtlPort    = "helmr-ctl"
	VMCtlIdle    = "idle"
	VMCtlStart   = "start"
	VMCtlError   = "error"
	VMCtlResume  = "resume"
	VMCtlResumed = "resumed"
)

// VMCtl is one control message.
type VMCtl struct {
	Type  string   `json:"type"`
	Start *VMStart `json:"start,omitempty"`
	Fresh *VMFresh `json:"fresh,omitempty"`
	Error string   `json:"error,omitempty"`
}

// VMStart is what the host tells the init to set up.
type VMStart struct {
	Boot  VMBoot  `json:"boot"`
	Fresh VMFresh `json:"fresh"`
}

// VMFresh is what a guest started or restored from a snapshot must not
// share with its other copies: the wall clock (a restored guest's stopped
// when the snapshot was taken) and entropy (its kernel's random state is
// the snapshot's).
type VMFresh struct {
	// TimeNs is the host's wall clock, in nanoseconds since the epoch.
	TimeNs int64 `json:"time_ns"`
	// Seed is fresh entropy from the host (32 bytes or more).
	Seed []byte `json:"seed"`
}

// vmCtl is the init's end of the control channel.
type vmCtl struct {
	r  *bufio.Reader
	mu sync.Mutex
	w  io.Writer
}

func newVMCtl(f io.ReadWriter) *vmCtl { return &vmCtl{r: bufio.NewReader(f), w: f} }

func (c *vmCtl) send(m VMCtl) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.w.Write(append(b, '\n'))
	return err
}

func (c *vmCtl) read() (VMCtl, error) {
	line, err := c.r.ReadBytes('\n')
	if err != nil {
		return VMCtl{}, fmt.Errorf("vm init: control channel: %w", err)
	}
	var m VMCtl
	if err := json.Unmarshal(line, &m); err != nil {
		return VMCtl{}, fmt.Errorf("vm init: control message: %w", err)
	}
	return m, nil
}

// waitStart reads until start.
func (c *vmCtl) waitStart() (*VMStart, error) {
	for {
		m, err := c.read()
		if err != nil {
			return nil, err
		}
		if m.Type == VMCtlStart && m.Start != nil {
			return m.Start, nil
		}
	}
}

// serve answers resume until the channel ends.
func (c *vmCtl) serve(log *slog.Logger) {
	for {
		m, err := c.read()
		if err != nil {
			log.Debug("control channel ended", "err", err)
			return
		}
		if m.Type != VMCtlResume || m.Fresh == nil {
			continue
		}
		reply := VMCtl{Type: VMCtlResumed}
		if err := m.Fresh.apply(); err != nil {
			reply = VMCtl{Type: VMCtlError, Error: err.Error()}
		}
		if err := c.send(reply); err != nil {
			log.Warn("control channel", "err", err)
		}
	}
}

// apply sets the wall clock and mixes the seed into the kernel's pool,
// then has the kernel reseed its generator from it at once (the pool
// alone would wait for the next scheduled reseed).
func (f VMFresh) apply() error {
	if f.TimeNs > 0 {
		ts := unix.NsecToTimespec(f.TimeNs)
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			return fmt.Errorf("vm init: set the clock: %w", err)
		}
	}
	if len(f.Seed) < 32 {
		return errors.New("vm init: a seed of 32 bytes or more is needed")
	}
	fd, err := unix.Open("/dev/urandom", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("vm init: %w", err)
	}
	defer unix.Close(fd)
	// struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
	info := make([]byte, 8+len(f.Seed))
	binary.NativeEndian.PutUint32(info[0:], uint32(8*len(f.Seed)))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(f.Seed)))
	copy(info[8:], f.Seed)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); e != 0 {
		return fmt.Errorf("vm init: add entropy: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.RNDRESEEDCRNG, 0); e != 0 {
		return fmt.Errorf("vm init: reseed: %w", e)
	}
	return nil
}

// dropCaches writes back and drops the kernel's clean caches, so that a
// snapshot taken now holds little beyond the kernel and the init.
func dropCaches() {
	unix.Sync()
	_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0)
}

// flushDiskBuffers drops what the kernel cached of each disk when its
// driver probed it: in a guest restored from a boot snapshot, those are
// blocks of the snapshot's disks, not of the ones now attached.
func flushDiskBuffers(disks map[string]string) error {
	for name, dev := range disks {
		fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("vm init: disk %s: %w", name, err)
		}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.BLKFLSBUF, 0)
		unix.Close(fd)
		if e != 0 {
			return fmt.Errorf("vm init: flush disk %s: %w", name, e)
		}
	}
	return nil
}
