package firecracker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrAPI is what every error answer of Firecracker's API wraps (as an
// *APIError, which says what was refused and why).
var ErrAPI = errors.New("firecracker api")

// APIError is an error answer of Firecracker's API: its status and the
// body's fault_message.
type APIError struct {
	Method, Path string
	Status       int
	Fault        string
}

func (e *APIError) Error() string {
	msg := e.Fault
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	return fmt.Sprintf("firecracker %s %s: %d: %s", e.Method, e.Path, e.Status, msg)
}

// Unwrap makes an APIError match ErrAPI.
func (e *APIError) Unwrap() error { return ErrAPI }

// Client talks to one Firecracker process over its API socket.
type Client struct {
	sock string
	http *http.Client
}

// requestTimeout bounds one API call: Firecracker answers configuration
// at once; a snapshot of a large guest takes longer (see CreateSnapshot).
const requestTimeout = 30 * time.Second

// NewClient returns a client of the API socket at sock (a path on the
// host: the jail's root plus the socket's path in the jail).
func NewClient(sock string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialUnix(ctx, sock)
		},
		DisableCompression: true,
		MaxIdleConns:       1,
	}
	return &Client{sock: sock, http: &http.Client{Transport: tr}}
}

// Close drops the client's idle connection.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// WaitReady polls the API socket until Firecracker answers GET / or ctx
// ends (Firecracker makes its socket once it has started).
func (c *Client) WaitReady(ctx context.Context) error {
	for {
		_, err := c.Describe(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("firecracker api at %s: %w (last: %v)", c.sock, ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Describe is GET /.
func (c *Client) Describe(ctx context.Context) (InstanceInfo, error) {
	var info InstanceInfo
	err := c.do(ctx, http.MethodGet, "/", nil, &info)
	return info, err
}

// PutBootSource is PUT /boot-source.
func (c *Client) PutBootSource(ctx context.Context, b BootSource) error {
	return c.do(ctx, http.MethodPut, "/boot-source", b, nil)
}

// PutDrive is PUT /drives/{drive_id}.
func (c *Client) PutDrive(ctx context.Context, d Drive) error {
	return c.do(ctx, http.MethodPut, "/drives/"+url.PathEscape(d.DriveID), d, nil)
}

// PutMachineConfig is PUT /machine-config.
func (c *Client) PutMachineConfig(ctx context.Context, m MachineConfig) error {
	return c.do(ctx, http.MethodPut, "/machine-config", m, nil)
}

// PutNetworkInterface is PUT /network-interfaces/{iface_id}.
func (c *Client) PutNetworkInterface(ctx context.Context, n NetworkInterface) error {
	return c.do(ctx, http.MethodPut, "/network-interfaces/"+url.PathEscape(n.IfaceID), n, nil)
}

// PutVsock is PUT /vsock.
func (c *Client) PutVsock(ctx context.Context, v Vsock) error {
	return c.do(ctx, http.MethodPut, "/vsock", v, nil)
}

// PutLogger is PUT /logger.
func (c *Client) PutLogger(ctx context.Context, l Logger) error {
	return c.do(ctx, http.MethodPut, "/logger", l, nil)
}

// PutMetrics is PUT /metrics.
func (c *Client) PutMetrics(ctx context.Context, m Metrics) error {
	return c.do(ctx, http.MethodPut, "/metrics", m, nil)
}

// Act is PUT /actions.
func (c *Client) Act(ctx context.Context, action string) error {
	return c.do(ctx, http.MethodPut, "/actions", Action{ActionType: action}, nil)
}

// SetState is PATCH /vm: StatePaused or StateResumed.
func (c *Client) SetState(ctx context.Context, state string) error {
	return c.do(ctx, http.MethodPatch, "/vm", VM{State: state}, nil)
}

// CreateSnapshot is PUT /snapshot/create (the VM paused first: SetState).
func (c *Client) CreateSnapshot(ctx context.Context, s SnapshotCreate) error {
	return c.do(ctx, http.MethodPut, "/snapshot/create", s, nil)
}

// LoadSnapshot is PUT /snapshot/load. On failure Firecracker exits.
func (c *Client) LoadSnapshot(ctx context.Context, s SnapshotLoad) error {
	return c.do(ctx, http.MethodPut, "/snapshot/load", s, nil)
}

// do sends one request with body as JSON (nil: none) and decodes a 200's
// body into out. Success is any 2xx (Firecracker answers 204 No Content
// to a PUT or PATCH); an error answer becomes an *APIError.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, requestTimeout)
		defer cancel()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("firecracker %s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	// The host part is a placeholder: the transport dials the socket.
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, rd)
	if err != nil {
		return fmt.Errorf("firecracker %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("firecracker %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("firecracker %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &APIError{Method: method, Path: path, Status: resp.StatusCode}
		var body apiError
		if json.Unmarshal(data, &body) == nil {
			e.Fault = body.FaultMessage
		} else {
			e.Fault = strings.TrimSpace(string(data))
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("firecracker %s %s: answer: %w", method, path, err)
		}
	}
	return nil
}
