package firecracker

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestBootOrder: Boot sends the logger first, then the machine, boot
// source, drives in the guest's order, network, vsock, and starts last.
func TestBootOrder(t *testing.T) {
	f := newFakeAPI(t)
	c := NewClient(f.sock)
	defer c.Close()
	if err := c.Boot(t.Context(), exampleMachine()); err != nil {
		t.Fatalf("Boot() = %v", err)
	}
	var got []string
	for _, call := range f.recorded() {
		got = append(got, call.key())
	}
	want := []string{"PUT /logger", "PUT /machine-config", "PUT /boot-source", "PUT /drives/layer0", "PUT /drives/helmr",
		"PUT /drives/workspace", "PUT /network-interfaces/eth0", "PUT /vsock", "PUT /actions"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Boot() requests (-want +got):\n%s", diff)
	}
	info, err := c.Describe(t.Context())
	if err != nil || info.State != InstanceRunning {
		t.Errorf("Describe() after Boot = %+v, %v; want state %q", info, err, InstanceRunning)
	}
}

// TestAPIErrors: an error answer becomes an *APIError that matches
// ErrAPI and carries the fault_message; Boot stops at the first refusal.
func TestAPIErrors(t *testing.T) {
	f := newFakeAPI(t)
	f.fail["PUT /drives/helmr"] = "Unable to open the block device backing file."
	c := NewClient(f.sock)
	defer c.Close()
	err := c.Boot(t.Context(), exampleMachine())
	var apiErr *APIError
	if !errors.Is(err, ErrAPI) || !errors.As(err, &apiErr) {
		t.Fatalf("Boot() = %v, want an *APIError", err)
	}
	want := &APIError{Method: http.MethodPut, Path: "/drives/helmr", Status: http.StatusBadRequest, Fault: "Unable to open the block device backing file."}
	if diff := cmp.Diff(want, apiErr); diff != "" {
		t.Errorf("APIError (-want +got):\n%s", diff)
	}
	if got := f.recorded(); got[len(got)-1].key() != "PUT /drives/helmr" {
		t.Errorf("Boot() went on after a refusal: last request %s", got[len(got)-1].key())
	}
	if !strings.Contains(err.Error(), "Unable to open the block device") {
		t.Errorf("error %q does not say Firecracker's fault", err)
	}
	// After start, configuration is refused, as Firecracker does.
	f2 := newFakeAPI(t)
	c2 := NewClient(f2.sock)
	defer c2.Close()
	if err := c2.Act(t.Context(), ActionInstanceStart); err != nil {
		t.Fatal(err)
	}
	if err := c2.PutVsock(t.Context(), Vsock{GuestCID: 3, UDSPath: VsockSock}); !errors.Is(err, ErrAPI) {
		t.Errorf("PutVsock after start = %v, want ErrAPI", err)
	}
}

// TestAPIErrorNotJSON: a body that is no fault_message is kept as text.
func TestAPIErrorNotJSON(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	c := NewClient(sock)
	defer c.Close()
	var apiErr *APIError
	if err := c.SetState(t.Context(), StatePaused); !errors.As(err, &apiErr) || apiErr.Status != 500 || apiErr.Fault != "boom" {
		t.Errorf("SetState() = %v, want an *APIError 500 boom", err)
	}
}

// TestWaitReady polls until the socket answers, and gives up with ctx.
func TestWaitReady(t *testing.T) {
	dir := t.TempDir()
	c := NewClient(filepath.Join(dir, "missing.sock"))
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := c.WaitReady(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitReady(no socket) = %v, want DeadlineExceeded", err)
	}
	f := newFakeAPI(t)
	c2 := NewClient(f.sock)
	defer c2.Close()
	if err := c2.WaitReady(t.Context()); err != nil {
		t.Errorf("WaitReady() = %v", err)
	}
}

// TestDialUnixLongPath: a socket whose path is too long for a socket
// address is reached through its directory.
func TestDialUnixLongPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	if len(sock) <= maxSunPath {
		t.Fatalf("test path %d bytes, want more than %d", len(sock), maxSunPath)
	}
	// Listen through the same trick: the path is too long to bind too.
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ln, err := net.Listen("unix", "/proc/self/fd/"+strconv.Itoa(int(d.Fd()))+"/api.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	conn, err := dialUnix(t.Context(), sock)
	if err != nil {
		t.Fatalf("dialUnix(%d-byte path) = %v", len(sock), err)
	}
	defer conn.Close()
	b := make([]byte, 2)
	if _, err := conn.Read(b); err != nil || string(b) != "hi" {
		t.Errorf("read %q, %v; want hi", b, err)
	}
}

func TestMachineValidate(t *testing.T) {
	if err := exampleMachine().Validate(); err != nil {
		t.Fatalf("Validate(example) = %v", err)
	}
	tests := []struct {
		name string
		edit func(*Machine)
	}{
		{"hyphen in a drive id", func(m *Machine) { m.Drives[0].DriveID = "layer-0" }},
		{"empty drive id", func(m *Machine) { m.Drives[0].DriveID = "" }},
		{"drive twice", func(m *Machine) { m.Drives[1].DriveID = m.Drives[0].DriveID }},
		{"dot in the interface id", func(m *Machine) { m.Net.IfaceID = "eth.0" }},
		{"no vCPU", func(m *Machine) { m.VCPUs = 0 }},
		{"33 vCPUs", func(m *Machine) { m.VCPUs = 33 }},
		{"no memory", func(m *Machine) { m.MemMiB = 0 }},
		{"no kernel", func(m *Machine) { m.Kernel = "" }},
	}
	for _, tt := range tests {
		m := exampleMachine()
		tt.edit(&m)
		if err := m.Validate(); err == nil {
			t.Errorf("Validate(%s) = nil, want an error", tt.name)
		}
	}
	f := newFakeAPI(t)
	c := NewClient(f.sock)
	defer c.Close()
	m := exampleMachine()
	m.Drives[0].DriveID = "layer-0"
	if err := c.Boot(t.Context(), m); err == nil || len(f.recorded()) != 0 {
		t.Errorf("Boot(invalid) = %v after %d requests, want an error before any", err, len(f.recorded()))
	}
}
