package microvm

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// qmp is a client of QEMU's machine protocol (QMP) on one end of a
// socketpair whose other end QEMU holds as its monitor (-chardev
// socket,fd=N -mon mode=control): JSON commands and answers, one a line,
// with asynchronous events in between, which the client skips. One
// command runs at a time.
type qmp struct {
	mu   sync.Mutex
	conn *net.UnixConn
	r    *bufio.Reader
}

// qmpError is QEMU's answer to a command that failed.
type qmpError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *qmpError) Error() string { return e.Class + ": " + e.Desc }

// newQMP takes the host's end of the monitor's socketpair, reads QEMU's
// greeting and leaves capabilities negotiation, as QMP asks.
func newQMP(ctx context.Context, f *os.File) (*qmp, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("qmp: %T is not a unix socket", c)
	}
	q := &qmp{conn: uc, r: bufio.NewReaderSize(uc, 64<<10)}
	if err := q.deadline(ctx); err != nil {
		q.close()
		return nil, err
	}
	var greeting struct {
		QMP json.RawMessage `json:"QMP"`
	}
	line, err := q.r.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &greeting)
	}
	if err == nil && greeting.QMP == nil {
		err = fmt.Errorf("not a greeting: %.200s", line)
	}
	if err != nil {
		q.close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if _, err := q.execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		q.close()
		return nil, err
	}
	return q, nil
}

func (q *qmp) close() error { return q.conn.Close() }

func (q *qmp) deadline(ctx context.Context) error {
	d, ok := ctx.Deadline()
	if !ok {
		d = time.Time{}
	}
	return q.conn.SetDeadline(d)
}

// execute runs command with args (nil: none) and returns its answer's
// "return" value. fd, if set, travels with the command (SCM_RIGHTS), as
// getfd and add-fd want.
func (q *qmp) execute(ctx context.Context, command string, args any, fd *os.File) (json.RawMessage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.deadline(ctx); err != nil {
		return nil, err
	}
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	b = append(b, '\n')
	if fd != nil {
		_, _, err = q.conn.WriteMsgUnix(b, unix.UnixRights(int(fd.Fd())), nil)
	} else {
		_, err = q.conn.Write(b)
	}
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	for {
		line, err := q.r.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("qmp %s: %w", command, err)
		}
		var ans struct {
			Return json.RawMessage `json:"return"`
			Error  *qmpError       `json:"error"`
			Event  string          `json:"event"`
		}
		if err := json.Unmarshal(line, &ans); err != nil {
			return nil, fmt.Errorf("qmp %s: %w", command, err)
		}
		switch {
		case ans.Event != "":
			continue
		case ans.Error != nil:
			return nil, fmt.Errorf("qmp %s: %w", command, ans.Error)
		case ans.Return != nil:
			return ans.Return, nil
		}
		return nil, fmt.Errorf("qmp %s: unexpected answer %.200s", command, line)
	}
}

// status is the VM's run state (query-status): "running", "paused",
// "inmigrate", "postmigrate", ...
func (q *qmp) status(ctx context.Context) (string, error) {
	ret, err := q.execute(ctx, "query-status", nil, nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(ret, &st); err != nil {
		return "", fmt.Errorf("qmp query-status: %w", err)
	}
	return st.Status, nil
}

// migrationBandwidth lifts QEMU's default cap on migration speed (32
// MiB/s in 7.2): a save to a local file should go as fast as the disk.
const migrationBandwidth = 64 << 30

// saveTo stops the VM's vCPUs (QEMU drains the disks' requests first) and
// writes its whole state, memory and devices, to f as a migration stream,
// returning once it is complete. The VM stays stopped (QEMU's
// "postmigrate"): cont runs it again, kill ends it.
func (q *qmp) saveTo(ctx context.Context, f *os.File) error {
	if _, err := q.execute(ctx, "stop", nil, nil); err != nil {
		return err
	}
	if _, err := q.execute(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": migrationBandwidth}, nil); err != nil {
		return err
	}
	if _, err := q.execute(ctx, "getfd", map[string]any{"fdname": "snapshot"}, f); err != nil {
		return err
	}
	if _, err := q.execute(ctx, "migrate", map[string]any{"uri": "fd:snapshot"}, nil); err != nil {
		return err
	}
	for {
		ret, err := q.execute(ctx, "query-migrate", nil, nil)
		if err != nil {
			return err
		}
		var st struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := json.Unmarshal(ret, &st); err != nil {
			return fmt.Errorf("qmp query-migrate: %w", err)
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("save the vm: migration %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("save the vm: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// waitIncoming waits until QEMU has read a migration stream it was
// started with (-incoming) and runs the VM, which keeps the state the
// snapshot had (stopped) until cont.
func (q *qmp) waitIncoming(ctx context.Context) error {
	for {
		st, err := q.status(ctx)
		if err != nil {
			return err
		}
		switch st {
		case "running":
			return nil
		case "inmigrate", "prelaunch":
		default:
			if _, err := q.execute(ctx, "cont", nil, nil); err != nil {
				return fmt.Errorf("resume the vm (%s): %w", st, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restore the vm: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
