package firecracker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// GuestCID is the vsock context id of every Helmr guest: each VM has a
// vsock device of its own behind its own socket, so the ids need not
// differ (3 is the least a guest may have).
const GuestCID = 3

// ErrVsockRefused is DialVsock's error when Firecracker closed the
// connection instead of answering OK: nothing in the guest listens on the
// port (yet).
var ErrVsockRefused = errors.New("vsock connection refused")

// vsockHandshakeTimeout bounds the CONNECT exchange of one attempt.
const vsockHandshakeTimeout = 5 * time.Second

// DialVsock connects to AF_VSOCK port of the guest through Firecracker's
// hybrid vsock: it connects to the device's unix socket (uds, a host
// path), writes "CONNECT <port>\n" and reads "OK <host port>\n"; from then
// on the connection is the guest's stream. One attempt: ErrVsockRefused
// when no guest process listens on port.
func DialVsock(ctx context.Context, uds string, port uint32) (net.Conn, error) {
	conn, err := dialUnix(ctx, uds)
	if err != nil {
		return nil, fmt.Errorf("vsock %s port %d: %w", uds, port, err)
	}
	deadline := time.Now().Add(vsockHandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	if err := handshake(conn, port); err != nil {
		conn.Close()
		return nil, fmt.Errorf("vsock %s port %d: %w", uds, port, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// DialVsockWait calls DialVsock until it connects or ctx ends: the guest
// listens once its init has started.
func DialVsockWait(ctx context.Context, uds string, port uint32) (net.Conn, error) {
	for {
		conn, err := DialVsock(ctx, uds, port)
		if err == nil {
			return conn, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// handshake writes the connect command and reads the answer line byte by
// byte: what follows the line is the guest's.
func handshake(conn net.Conn, port uint32) error {
	if _, err := conn.Write([]byte("CONNECT " + strconv.FormatUint(uint64(port), 10) + "\n")); err != nil {
		return err
	}
	var line []byte
	b := make([]byte, 1)
	for len(line) < 64 {
		n, err := conn.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				return checkOK(string(line))
			}
			line = append(line, b[0])
			continue
		}
		if err != nil {
			if len(line) == 0 {
				return fmt.Errorf("%w: %v", ErrVsockRefused, err)
			}
			return fmt.Errorf("answer %q cut short: %w", line, err)
		}
	}
	return fmt.Errorf("answer %q too long", line)
}

// checkOK accepts "OK <host port>".
func checkOK(line string) error {
	rest, ok := strings.CutPrefix(line, "OK ")
	if !ok {
		return fmt.Errorf("answer %q, want OK <port>", line)
	}
	if _, err := strconv.ParseUint(rest, 10, 32); err != nil {
		return fmt.Errorf("answer %q, want OK <port>", line)
	}
	return nil
}
