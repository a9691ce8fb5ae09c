// Package firecracker drives Firecracker, the microvm tier's second VMM
// (the first is QEMU's microvm machine; both boot the guest format of
// package guestfmt). It holds what the tier needs of Firecracker and no
// policy: the API's request types (api.go), a client over the API's unix
// socket mapping Firecracker's {"fault_message": ...} answers to *APIError
// (client.go), the ordered requests that configure and start a VM
// (Machine.BootRequests), the jailer's command line and the placing of a
// VM's files in its jail (Jail), the host side of Firecracker's hybrid
// vsock (DialVsock), and finding the installed binaries (Find).
//
// A VM's jail, as the jailer makes it from Jail (ChrootBase is the tier's
// StateDir/jail, on the file system of its images, so that files are hard
// linked in rather than copied):
//
//	<ChrootBase>/firecracker/<ID>/root/     the VM's root: Firecracker's "/"
//	    firecracker                         copied there by the jailer
//	    api.sock                            the API socket (--api-sock)
//	    vsock.sock                          the vsock device's socket
//	    vmlinux, initramfs.cpio             the guest kernel and initramfs
//	    disks/<name>.ext4                   one per disk, in attach order
//	    snapshot/                           a snapshot's state and memory
//	    dev/kvm, dev/net/tun                made by the jailer
//
// The kernel, initramfs and disks are hard links to the tier's files
// (the jailer closes every descriptor but stdio before it execs
// Firecracker, so files reach it by path, not as descriptors as they do
// QEMU), or, where a file is on another file system (a workspace image
// the worker keeps elsewhere), bind mounts onto an empty file, undone by
// Jail.Remove. Firecracker runs as Jail.UID:GID, pivoted into root, in a
// cgroup <cgroup root>/<CgroupParent>/<ID> the jailer makes with the
// VM's limits, in the network namespace Jail.Netns if set; the jailer
// execs it in place (no --daemonize, no --new-pid-ns), so the process
// the caller started is Firecracker and its stdout is the guest's
// console (ttyS0).
//
// What is verified, and where: every request body Helmr sends is checked
// in unit tests against a JSON Schema transcribed from Firecracker's
// published API document (testdata/firecracker-api.schema.json, made
// strict as Firecracker's types deny unknown fields); the client, the
// boot order and the error mapping against a hand-written fake API server;
// the vsock handshake against a fake unix listener; the jailer's command
// line and the jail's files on this host. None of that runs Firecracker: a
// test in package microvm boots a guest under Firecracker where the
// firecracker and jailer binaries are installed and /dev/kvm boots a
// stock kernel, and is reported as not run elsewhere (helmr doctor says
// why). Firecracker 1.8 or later is needed (MinVersion): it describes its
// virtio-mmio devices to the guest in ACPI tables, and the guest kernel
// (Debian's cloud kernel) cannot take them from the command line.
package firecracker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// MinVersion is the least Firecracker release this package drives: the
// first that describes virtio devices in ACPI tables (the guest kernel
// has no CONFIG_VIRTIO_MMIO_CMDLINE_DEVICES).
var MinVersion = Version{1, 8, 0}

// Version is a Firecracker release.
type Version [3]int

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// Less reports whether v is older than w.
func (v Version) Less(w Version) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

var versionRE = regexp.MustCompile(`v?([0-9]+)\.([0-9]+)\.([0-9]+)`)

// ParseVersion reads the first x.y.z of out (`firecracker --version`
// prints "Firecracker v1.10.1", `jailer --version` "Jailer v1.10.1").
func ParseVersion(out string) (Version, error) {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return Version{}, fmt.Errorf("no version in %q", firstLine(out))
	}
	var v Version
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v, nil
}

// Install is what Find found of Firecracker on this host.
type Install struct {
	// Firecracker and Jailer are the binaries' paths; empty: not found.
	Firecracker, Jailer string
	// Version and JailerVersion are what they print; zero: unknown.
	Version, JailerVersion Version
	// Err says why a found binary's version is unknown.
	Err error
}

// Find looks for the firecracker and jailer binaries in PATH, then in
// dirs, and asks each for its version.
func Find(dirs ...string) Install {
	var in Install
	var errs []error
	in.Firecracker, in.Version, errs = findBinary("firecracker", dirs, errs)
	in.Jailer, in.JailerVersion, errs = findBinary("jailer", dirs, errs)
	in.Err = errors.Join(errs...)
	return in
}

func findBinary(name string, dirs []string, errs []error) (string, Version, []error) {
	path, err := exec.LookPath(name)
	if err != nil {
		path = ""
		for _, d := range dirs {
			p := filepath.Join(d, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				path = p
				break
			}
		}
	}
	if path == "" {
		return "", Version{}, errs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return path, Version{}, append(errs, fmt.Errorf("%s --version: %w", path, err))
	}
	v, err := ParseVersion(string(out))
	if err != nil {
		return path, Version{}, append(errs, fmt.Errorf("%s --version: %w", path, err))
	}
	return path, v, errs
}

// Usable returns nil when both binaries are there, of one version, at
// least MinVersion; else what is missing or wrong.
func (in Install) Usable() error {
	var missing []string
	if in.Firecracker == "" {
		missing = append(missing, "no firecracker binary")
	}
	if in.Jailer == "" {
		missing = append(missing, "no jailer binary")
	}
	switch {
	case len(missing) > 0:
		return errors.New(strings.Join(missing, ", ") + " (in PATH or $HELMR_CACHE_DIR/bin)")
	case in.Err != nil:
		return in.Err
	case in.Version != in.JailerVersion:
		return fmt.Errorf("firecracker %s and jailer %s differ (the jailer must come with its firecracker)", in.Version, in.JailerVersion)
	case in.Version.Less(MinVersion):
		return fmt.Errorf("firecracker %s is older than %s (needed: virtio devices described in ACPI tables)", in.Version, MinVersion)
	}
	return nil
}

// String says what was found, for helmr doctor.
func (in Install) String() string {
	part := func(name, path string, v Version) string {
		if path == "" {
			return name + " not found"
		}
		if v == (Version{}) {
			return name + " " + path + " (version unknown)"
		}
		return name + " " + v.String() + " (" + path + ")"
	}
	return part("firecracker", in.Firecracker, in.Version) + ", " + part("jailer", in.Jailer, in.JailerVersion)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
