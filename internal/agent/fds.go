package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// MaxFDs is the most descriptors one frame carries (the kernel's
// SCM_MAX_FD).
const MaxFDs = 253

// ErrNoFDPassing: descriptors were to be sent on a stream that is not a
// unix socket.
var ErrNoFDPassing = errors.New("agent stream cannot pass descriptors")

// fdSender and fdReceiver are the parts of *net.UnixConn that pass
// descriptors.
type (
	fdSender interface {
		WriteMsgUnix(b, oob []byte, addr *net.UnixAddr) (n, oobn int, err error)
	}
	fdReceiver interface {
		ReadMsgUnix(b, oob []byte) (n, oobn, flags int, addr *net.UnixAddr, err error)
	}
)

// SendFDs encodes m and writes it as one frame whose bytes carry fds
// (SCM_RIGHTS) on a unix socket; ReadMsgFDs receives both. The caller keeps
// its copies of fds and closes them.
func (w *Writer) SendFDs(m Msg, fds []int) error {
	if len(fds) == 0 {
		return w.Send(m)
	}
	conn, ok := w.w.(fdSender)
	if !ok {
		return fmt.Errorf("send %s: %w", m.MessageType(), ErrNoFDPassing)
	}
	if len(fds) > MaxFDs {
		return fmt.Errorf("send %s with %d descriptors: more than %d", m.MessageType(), len(fds), MaxFDs)
	}
	payload, err := Encode(m)
	if err != nil {
		return err
	}
	if len(payload) > MaxFrameSize {
		return fmt.Errorf("write frame of %d bytes: %w", len(payload), ErrFrameTooLarge)
	}
	buf := make([]byte, 4+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(len(payload)))
	copy(buf[4:], payload)
	w.mu.Lock()
	defer w.mu.Unlock()
	n, _, err := conn.WriteMsgUnix(buf, unix.UnixRights(fds...), nil)
	if err == nil && n < len(buf) {
		// A short write: the descriptors went with the first bytes.
		_, err = w.w.Write(buf[n:])
	}
	if err != nil {
		return fmt.Errorf("write frame with descriptors: %w", err)
	}
	return nil
}

// ReadMsgFDs reads one message like ReadMsg and, if r is a unix socket,
// the descriptors sent with it (SendFDs). The descriptors are close-on-exec
// and the caller's to close; on error none are left open. Only the frame's
// header is read with recvmsg: the kernel hands descriptors to the read
// that takes the first byte they were sent with.
func ReadMsgFDs(r io.Reader) (m Msg, fds []int, err error) {
	rc, ok := r.(fdReceiver)
	if !ok {
		m, err = ReadMsg(r)
		return m, nil, err
	}
	defer func() {
		if err != nil {
			closeFDs(fds)
			fds = nil
		}
	}()
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(MaxFDs*4))
	for got := 0; got < len(hdr); {
		n, oobn, flags, _, err := rc.ReadMsgUnix(hdr[got:], oob)
		more, perr := parseRights(oob[:oobn])
		fds = append(fds, more...)
		switch {
		case perr != nil:
			return nil, fds, perr
		case flags&unix.MSG_CTRUNC != 0:
			return nil, fds, fmt.Errorf("read frame header: more than %d descriptors", MaxFDs)
		case err != nil && (got > 0 || n > 0) && errors.Is(err, io.EOF):
			return nil, fds, fmt.Errorf("read frame header: %w", io.ErrUnexpectedEOF)
		case err != nil:
			return nil, fds, err
		case n == 0 && got > 0:
			return nil, fds, fmt.Errorf("read frame header: %w", io.ErrUnexpectedEOF)
		case n == 0:
			return nil, fds, io.EOF
		}
		got += n
	}
	payload, err := readBody(r, hdr)
	if err != nil {
		return nil, fds, err
	}
	m, err = Decode(payload)
	return m, fds, err
}

// parseRights returns the descriptors in a control message buffer.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("parse control message: %w", err)
	}
	var fds []int
	for _, cm := range msgs {
		if cm.Header.Level != unix.SOL_SOCKET || cm.Header.Type != unix.SCM_RIGHTS {
			continue
		}
		more, err := unix.ParseUnixRights(&cm)
		if err != nil {
			closeFDs(fds)
			return nil, fmt.Errorf("parse descriptors: %w", err)
		}
		fds = append(fds, more...)
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
