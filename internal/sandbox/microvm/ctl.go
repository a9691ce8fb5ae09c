package microvm

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/agent/guest"
	"github.com/helmr/helmr/internal/sandbox"
)

// ctlConn is the host's end of the guest init's control channel (see
// guest.VMCtl): one goroutine reads its messages into a queue that wait
// takes them from.
type ctlConn struct {
	conn net.Conn
	msgs chan guest.VMCtl
	done chan struct{} // closed once the reader returned

	mu  sync.Mutex
	err error // why the channel ended
}

func newCtlConn(f *os.File) (*ctlConn, error) {
	conn, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("control channel: %w", err)
	}
	return newCtlConnOf(conn), nil
}

// newCtlConnOf reads and writes the control channel on conn.
func newCtlConnOf(conn net.Conn) *ctlConn {
	c := &ctlConn{conn: conn, msgs: make(chan guest.VMCtl, 8), done: make(chan struct{})}
	go c.read()
	return c
}

func (c *ctlConn) read() {
	defer close(c.done)
	r := bufio.NewReader(c.conn)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		var m guest.VMCtl
		if err := json.Unmarshal(line, &m); err != nil {
			c.mu.Lock()
			c.err = fmt.Errorf("bad control message: %w", err)
			c.mu.Unlock()
			return
		}
		select {
		case c.msgs <- m:
		default: // nobody waits for it: the init says only what it is asked
		}
	}
}

func (c *ctlConn) close() error {
	err := c.conn.Close()
	<-c.done
	return err
}

func (c *ctlConn) send(m guest.VMCtl) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if _, err := c.conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("control channel: %w", err)
	}
	return nil
}

// wait returns the next message of type want; an error message from the
// init, an ended channel or ctx's end are errors.
func (c *ctlConn) wait(ctx context.Context, want string) error {
	for {
		select {
		case m := <-c.msgs:
			switch m.Type {
			case want:
				return nil
			case guest.VMCtlError:
				return fmt.Errorf("%w: guest init: %s", sandbox.ErrGuestRuntime, m.Error)
			}
		case <-c.done:
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			return fmt.Errorf("%w: control channel ended before %s: %w", sandbox.ErrGuestRuntime, want, err)
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for the guest's %s: %w", sandbox.ErrGuestRuntime, want, ctx.Err())
		}
	}
}

// fresh is what a guest started or restored now must not share with its
// snapshot's other copies: this host's clock and new entropy.
func fresh(now time.Time) (guest.VMFresh, error) {
	seed := make([]byte, 64)
	if _, err := rand.Read(seed); err != nil {
		return guest.VMFresh{}, err
	}
	return guest.VMFresh{TimeNs: now.UnixNano(), Seed: seed}, nil
}
