package agent

import (
	"bytes"
	"errors"
	"net"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// unixPair returns both ends of a connected unix stream socket pair.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
		t.Cleanup(func() { c.Close() })
	}
	return conns[0], conns[1]
}

func TestSendFDs(t *testing.T) {
	a, b := unixPair(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	init := &Init{StateDir: "/s", RootLayers: []string{"fd:1"}, Workspace: "/workspace", WorkspaceSource: "fd:0"}
	wr := NewWriter(a)
	if err := wr.SendFDs(init, []int{int(r.Fd()), int(w.Fd())}); err != nil {
		t.Fatalf("SendFDs() = %v", err)
	}
	// A plain frame after it is read apart from it.
	if err := wr.Send(&Ready{Version: Version}); err != nil {
		t.Fatal(err)
	}
	m, fds, err := ReadMsgFDs(b)
	if err != nil || len(fds) != 2 {
		t.Fatalf("ReadMsgFDs() = %v, %v, %v; want init and 2 descriptors", m, fds, err)
	}
	defer closeFDs(fds)
	if diff := cmp.Diff(Msg(init), m); diff != "" {
		t.Errorf("ReadMsgFDs() message (-want +got):\n%s", diff)
	}
	for _, fd := range fds {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Errorf("received fd %d flags = %#x, %v; want FD_CLOEXEC", fd, flags, err)
		}
	}
	// fds[1] is the pipe's write end: what goes in comes out of r.
	if _, err := unix.Write(fds[1], []byte("x")); err != nil {
		t.Fatalf("write to received fd: %v", err)
	}
	buf := make([]byte, 1)
	if _, err := r.Read(buf); err != nil || buf[0] != 'x' {
		t.Errorf("read through received pipe = %q, %v; want x", buf, err)
	}
	m, fds2, err := ReadMsgFDs(b)
	if err != nil || len(fds2) != 0 || m.MessageType() != TypeReady {
		t.Errorf("second ReadMsgFDs() = %v, %v, %v; want ready without descriptors", m, fds2, err)
	}
}

func TestSendFDsNeedsUnixSocket(t *testing.T) {
	var buf bytes.Buffer
	if err := NewWriter(&buf).SendFDs(&Init{}, []int{0}); !errors.Is(err, ErrNoFDPassing) {
		t.Errorf("SendFDs(to a buffer) = nil, want ErrNoFDPassing")
	}
	// Without descriptors it is a plain frame, read by either reader.
	if err := NewWriter(&buf).SendFDs(&Ready{Version: Version}, nil); err != nil {
		t.Fatal(err)
	}
	if m, fds, err := ReadMsgFDs(&buf); err != nil || fds != nil || m.MessageType() != TypeReady {
		t.Errorf("ReadMsgFDs(buffer) = %v, %v, %v; want ready", m, fds, err)
	}
}
