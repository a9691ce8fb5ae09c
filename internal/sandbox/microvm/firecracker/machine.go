package firecracker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"unicode"
)

// Machine is one VM as Firecracker is told of it; paths are as
// Firecracker sees them, in its jail (Jail.Path).
type Machine struct {
	// Kernel is the uncompressed ELF kernel (guestfmt.Kernel.Vmlinux),
	// Initrd the tier's initramfs, BootArgs the whole command line.
	Kernel, Initrd, BootArgs string
	VCPUs                    int
	MemMiB                   int64
	// Drives are the disks in the order the guest finds them (the
	// guest's init names them by that order: guest.VMArgDiskNames).
	Drives []Drive
	// Net, if set, is the guest's interface.
	Net *NetworkInterface
	// Vsock, if set, is the vsock device (the agent's stream).
	Vsock *Vsock
	// Logger, if set, configures Firecracker's own log first.
	Logger *Logger
}

// Request is one call of Firecracker's API.
type Request struct {
	Method, Path string
	Body         any
}

// BootRequests are the calls that configure m and start it, in the order
// they are sent: the logger (which must come first), the machine, the
// boot source, the drives in order, the network interface, the vsock
// device, then InstanceStart.
func (m Machine) BootRequests() []Request {
	var rs []Request
	if m.Logger != nil {
		rs = append(rs, Request{http.MethodPut, "/logger", *m.Logger})
	}
	rs = append(rs,
		Request{http.MethodPut, "/machine-config", MachineConfig{VCPUCount: m.VCPUs, MemSizeMiB: m.MemMiB}},
		Request{http.MethodPut, "/boot-source", BootSource{KernelImagePath: m.Kernel, InitrdPath: m.Initrd, BootArgs: m.BootArgs}},
	)
	for _, d := range m.Drives {
		rs = append(rs, Request{http.MethodPut, "/drives/" + url.PathEscape(d.DriveID), d})
	}
	if m.Net != nil {
		rs = append(rs, Request{http.MethodPut, "/network-interfaces/" + url.PathEscape(m.Net.IfaceID), *m.Net})
	}
	if m.Vsock != nil {
		rs = append(rs, Request{http.MethodPut, "/vsock", *m.Vsock})
	}
	return append(rs, Request{http.MethodPut, "/actions", Action{ActionType: ActionInstanceStart}})
}

// Validate checks what Firecracker would refuse of m before any request
// is sent: an id in a path that is empty or holds anything but letters,
// digits and underscores (its API server's rule), a drive twice, vCPUs
// outside 1 to 32, no memory, no kernel.
func (m Machine) Validate() error {
	switch {
	case m.Kernel == "":
		return errors.New("machine: no kernel")
	case m.VCPUs < 1 || m.VCPUs > 32:
		return fmt.Errorf("machine: %d vCPUs, want 1 to 32", m.VCPUs)
	case m.MemMiB < 1:
		return fmt.Errorf("machine: %d MiB of memory", m.MemMiB)
	}
	ids := map[string]bool{}
	for _, d := range m.Drives {
		if !validID(d.DriveID) || ids[d.DriveID] {
			return fmt.Errorf("machine: drive id %q: want a unique, non-empty id of letters, digits and underscores", d.DriveID)
		}
		ids[d.DriveID] = true
	}
	if m.Net != nil && !validID(m.Net.IfaceID) {
		return fmt.Errorf("machine: interface id %q: want letters, digits and underscores", m.Net.IfaceID)
	}
	return nil
}

// validID is the API server's rule for an id in a path.
func validID(id string) bool {
	if id == "" {
		return false
	}
	for _, r := range id {
		if r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			return false
		}
	}
	return true
}

// Boot configures m and starts it: BootRequests, in order, stopping at
// the first refused.
func (c *Client) Boot(ctx context.Context, m Machine) error {
	if err := m.Validate(); err != nil {
		return err
	}
	for _, r := range m.BootRequests() {
		if err := c.do(ctx, r.Method, r.Path, r.Body, nil); err != nil {
			return err
		}
	}
	return nil
}

// SnapshotRequests are the calls that take a full snapshot of a running
// VM (pause, then create) to statePath and memPath, paths in its jail.
// The VM stays paused: resume it (SetState) or end it.
func SnapshotRequests(statePath, memPath string) []Request {
	return []Request{
		{http.MethodPatch, "/vm", VM{State: StatePaused}},
		{http.MethodPut, "/snapshot/create", SnapshotCreate{SnapshotType: SnapshotFull, SnapshotPath: statePath, MemFilePath: memPath}},
	}
}

// Snapshot pauses the VM and takes a full snapshot (SnapshotRequests).
// Firecracker resets the guest's vsock connections when it does: the
// agent's stream ends.
func (c *Client) Snapshot(ctx context.Context, statePath, memPath string) error {
	for _, r := range SnapshotRequests(statePath, memPath) {
		if err := c.do(ctx, r.Method, r.Path, r.Body, nil); err != nil {
			return err
		}
	}
	return nil
}

// RestoreRequest is the call that loads a snapshot into a fresh
// Firecracker and resumes it.
func RestoreRequest(statePath, memPath string) Request {
	return Request{http.MethodPut, "/snapshot/load", SnapshotLoad{
		SnapshotPath: statePath,
		MemBackend:   &MemoryBackend{BackendType: BackendFile, BackendPath: memPath},
		ResumeVM:     true,
	}}
}

// Restore loads a snapshot into this (fresh) Firecracker and resumes it.
func (c *Client) Restore(ctx context.Context, statePath, memPath string) error {
	r := RestoreRequest(statePath, memPath)
	return c.do(ctx, r.Method, r.Path, r.Body, nil)
}
