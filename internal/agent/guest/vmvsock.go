package guest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// agentStream is where the worker's stream comes from, as the kernel
// command line says (VMArgAgent).
type agentStream struct {
	// vsockPort, when set, is the AF_VSOCK port to listen on; zero: the
	// virtio-serial port VMPort.
	vsockPort uint32
}

// parseAgentArg reads VMArgAgent from a kernel command line.
func parseAgentArg(cmdline string) (agentStream, error) {
	var a agentStream
	for _, w := range strings.Fields(cmdline) {
		v, ok := strings.CutPrefix(w, VMArgAgent)
		if !ok {
			continue
		}
		p, ok := strings.CutPrefix(v, "vsock:")
		n, err := strconv.ParseUint(p, 10, 32)
		if !ok || err != nil || n == 0 || n >= unix.VMADDR_PORT_ANY-1 { // PORT+1 is the control channel
			return agentStream{}, fmt.Errorf("vm init: %s%s: want vsock:PORT", VMArgAgent, v)
		}
		a.vsockPort = uint32(n)
	}
	return a, nil
}

// openStreams opens the init's control channel and the worker's stream
// as cmdline selects: the virtio-serial ports VMCtlPort and VMPort, or the
// first connections to the AF_VSOCK ports of VMArgAgent: PORT+1 for the
// control channel, then PORT for the stream (the host connects in that
// order).
func openStreams(cmdline string) (ctl, stream *os.File, err error) {
	a, err := parseAgentArg(cmdline)
	if err != nil {
		return nil, nil, err
	}
	open := func(port string, vsock uint32) (*os.File, error) {
		if a.vsockPort == 0 {
			return openPort(port)
		}
		return acceptVsock(vsock)
	}
	if ctl, err = open(VMCtlPort, a.vsockPort+1); err != nil {
		return nil, nil, err
	}
	if stream, err = open(VMPort, a.vsockPort); err != nil {
		ctl.Close()
		return nil, nil, err
	}
	return ctl, stream, nil
}

// acceptVsock listens on AF_VSOCK port (any CID: the guest's own) and
// returns the first connection, then closes the listener: the worker
// connects once (through the VMM's vsock device), and no process of the
// sandbox may connect later in its place. The listener is retried until
// vmDeviceWait has passed: the vsock transport's driver may still be
// probing its device.
func acceptVsock(port uint32) (*os.File, error) {
	deadline := time.Now().Add(vmDeviceWait)
	var lfd int
	for {
		var err error
		lfd, err = listenVsock(port)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("vm init: listen on vsock port %d: %w", port, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	defer unix.Close(lfd)
	for {
		fd, _, err := unix.Accept4(lfd, unix.SOCK_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("vm init: accept on vsock port %d: %w", port, err)
		}
		return os.NewFile(uintptr(fd), "vsock-agent"), nil
	}
}

func listenVsock(port uint32) (int, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Listen(fd, 1); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
