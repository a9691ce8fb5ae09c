package firecracker

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// fakeVsock is a hand-written stand-in for the host side of Firecracker's
// hybrid vsock device: it reads the CONNECT line and answers as answer
// says for that attempt (attempt counts from 0).
func fakeVsock(t *testing.T, answer func(attempt int, port string) (reply string, ok bool)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vsock.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var attempts atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn, n int) {
				defer c.Close()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					return
				}
				reply, ok := answer(n, line)
				if !ok {
					return // nothing listens in the guest: Firecracker closes
				}
				// The answer and the guest's first bytes in one write: the
				// dialer must not swallow what follows the line.
				if _, err := io.WriteString(c, reply+"guest-hello"); err != nil {
					return
				}
				buf := make([]byte, 4)
				if _, err := io.ReadFull(c, buf); err == nil {
					c.Write(buf) // echo
				}
			}(c, int(attempts.Add(1)-1))
		}
	}()
	return path
}

func TestDialVsock(t *testing.T) {
	path := fakeVsock(t, func(_ int, line string) (string, bool) {
		if line != "CONNECT 1024\n" {
			return "", false
		}
		return "OK 1073741824\n", true
	})
	conn, err := DialVsock(t.Context(), path, 1024)
	if err != nil {
		t.Fatalf("DialVsock() = %v", err)
	}
	defer conn.Close()
	got := make([]byte, len("guest-hello"))
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "guest-hello" {
		t.Fatalf("first guest bytes = %q, %v; want guest-hello", got, err)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, 4)
	if _, err := io.ReadFull(conn, echo); err != nil || string(echo) != "ping" {
		t.Errorf("echo = %q, %v; want ping", echo, err)
	}
}

func TestDialVsockRefusals(t *testing.T) {
	tests := []struct {
		name    string
		reply   string
		ok      bool
		refused bool
	}{
		{"nothing listens", "", false, true},
		{"not OK", "NOPE\n", true, false},
		{"OK without port", "OK \n", true, false},
		{"OK with junk", "OK x1\n", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := fakeVsock(t, func(int, string) (string, bool) { return tt.reply, tt.ok })
			conn, err := DialVsock(t.Context(), path, 52)
			if err == nil {
				conn.Close()
				t.Fatalf("DialVsock() = nil error, want one")
			}
			if got := errors.Is(err, ErrVsockRefused); got != tt.refused {
				t.Errorf("DialVsock() = %v; ErrVsockRefused %v, want %v", err, got, tt.refused)
			}
		})
	}
}

// TestDialVsockWait: refused while the guest's init has not started
// listening, then connected.
func TestDialVsockWait(t *testing.T) {
	path := fakeVsock(t, func(attempt int, _ string) (string, bool) { return "OK 7\n", attempt >= 3 })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, err := DialVsockWait(ctx, path, 1024)
	if err != nil {
		t.Fatalf("DialVsockWait() = %v", err)
	}
	conn.Close()
	never := fakeVsock(t, func(int, string) (string, bool) { return "", false })
	ctx2, cancel2 := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel2()
	if _, err := DialVsockWait(ctx2, never, 1024); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrVsockRefused) {
		t.Errorf("DialVsockWait(never listening) = %v, want DeadlineExceeded and ErrVsockRefused", err)
	}
}
