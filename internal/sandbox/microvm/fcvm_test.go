package microvm

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent/guest"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/microvm/firecracker"
	"github.com/helmr/helmr/internal/sandbox/microvm/firecracker/fctest"
	"github.com/helmr/helmr/internal/sandbox/microvm/guestfmt"
	"github.com/helmr/helmr/internal/testenv"
)

var fcDisks = []vmDisk{
	{name: "layer0", path: "/state/layers/layer-a.ext4", readOnly: true},
	{name: "layer1", path: "/state/layers/layer-b.ext4", readOnly: true},
	{name: "helmr", path: "/state/sandboxes/s/helmr.ext4", readOnly: true},
	{name: guest.VMWorkspaceDisk, path: "/state/sandboxes/s/workspace.ext4"},
}

// TestFirecrackerMachine: the VM the tier describes to Firecracker has
// the disks in order and named in that order on the command line, the
// agent on vsock, the machine's size and interface, and every request
// that describes it matches Firecracker's published API. (The sandbox's
// limits travel on the control channel, not on the command line.)
func TestFirecrackerMachine(t *testing.T) {
	shape := machine{MemMiB: (512<<20 + guestMemOverhead) >> 20, CPUs: 2, Net: true}
	m := fcMachine(fcDisks, shape, true)
	args := strings.Fields(m.BootArgs)
	for _, want := range []string{"console=ttyS0", "reboot=k", "helmr.disknames=layer0,layer1,helmr,workspace",
		"helmr.agent=vsock:1024", "helmr.halt=reboot"} {
		if !slices.Contains(args, want) {
			t.Errorf("boot args %q lack %q", m.BootArgs, want)
		}
	}
	var drives []string
	for _, d := range m.Drives {
		drives = append(drives, d.DriveID+":"+d.PathOnHost+":"+map[bool]string{true: "ro", false: "rw"}[d.IsReadOnly])
	}
	want := []string{"layer0:/disks/layer0.ext4:ro", "layer1:/disks/layer1.ext4:ro", "helmr:/disks/helmr.ext4:ro", "workspace:/disks/workspace.ext4:rw"}
	if diff := cmp.Diff(want, drives); diff != "" {
		t.Errorf("drives (-want +got):\n%s", diff)
	}
	if m.MemMiB != (512<<20+guestMemOverhead)>>20 || m.VCPUs != 2 || m.Net == nil || m.Net.HostDevName != fcTap || m.Vsock.GuestCID != 3 {
		t.Errorf("machine = %+v", m)
	}
	if err := m.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	s := fctest.Load(t)
	for _, r := range m.BootRequests() {
		body, err := json.Marshal(r.Body)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Check(r.Method, r.Path, body); err != nil {
			t.Error(err)
		}
	}
	if m := fcMachine(fcDisks, machine{MemMiB: 608, CPUs: 1}, false); m.Net != nil {
		t.Errorf("machine without network = %+v", m)
	}
}

func TestFirecrackerCgroups(t *testing.T) {
	v2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpuset cpu io memory hugetlb pids rdma misc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v2mem := t.TempDir()
	if err := os.WriteFile(filepath.Join(v2mem, "cgroup.controllers"), []byte("memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	v1 := t.TempDir()
	for _, c := range []string{"memory", "pids"} {
		if err := os.MkdirAll(filepath.Join(v1, c), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(v1, c, "cgroup.procs"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		root    string
		cpus    float64
		version int
		want    []string
	}{
		{"v2", v2, 1.5, 2, []string{"memory.max=1073741824", "cpu.max=150000 100000", "pids.max=256"}},
		{"v2 without a CPU quota", v2, 0, 2, []string{"memory.max=1073741824", "pids.max=256"}},
		{"v2 with memory only", v2mem, 2, 2, []string{"memory.max=1073741824"}},
		{"v1 without cpu", v1, 1, 1, []string{"memory.limit_in_bytes=1073741824", "pids.max=256"}},
	}
	for _, tt := range tests {
		version, got := fcCgroups(tt.root, 1<<30, tt.cpus)
		if version != tt.version || !cmp.Equal(got, tt.want) {
			t.Errorf("%s: fcCgroups() = %d, %q; want %d, %q", tt.name, version, got, tt.version, tt.want)
		}
	}
}

func TestJailID(t *testing.T) {
	a, b := jailID("/run/helmr/microvm/w1", "sb_1"), jailID("/run/helmr/microvm/w2", "sb_1")
	j := &firecracker.Jail{ID: a, Jailer: "/j/jailer", Firecracker: "/j/firecracker", UID: 1, GID: 1, ChrootBase: "/b", CgroupVersion: 2}
	if err := j.Validate(); err != nil || a == b || a != jailID("/run/helmr/microvm/w1", "sb_1") {
		t.Errorf("jailID = %q, %q (%v): want valid, stable, distinct per state dir", a, b, err)
	}
}

// TestJailVM places a sandbox's files in its jail as for Firecracker
// (without running it): links, permissions for Firecracker's uid, and
// everything undone by cleanup.
func TestJailVM(t *testing.T) {
	testenv.RequireRoot(t)
	state := t.TempDir()
	file := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(state, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	r := &Runtime{cfg: Config{StateDir: state, UID: 64055, GID: 64055, CgroupRoot: t.TempDir(), CgroupParent: "helmr-microvm",
		Kernel:      guestfmt.Kernel{Vmlinux: file("kernel/vmlinux", "elf", 0o644)},
		Firecracker: firecracker.Install{Firecracker: "/usr/local/bin/firecracker", Jailer: "/usr/local/bin/jailer"}},
		initramfs: file("initramfs-x.cpio", "cpio", 0o644), vmm: VMMFirecracker, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s := newSandbox(r, sandbox.Spec{ID: "jail-test"})
	disks := []vmDisk{
		{name: "layer0", path: file("layers/layer-a.ext4", "layer", 0o600), readOnly: true},
		{name: "workspace", path: file("ws/workspace.ext4", "ws", 0o600)},
	}
	s.machine = machine{MemMiB: (256<<20 + guestMemOverhead) >> 20, CPUs: 1}
	m := fcMachine(disks, s.machine, false)
	s.fc = &fcVM{jail: s.newJail(jailID(state, "jail-test")), cgroot: r.cfg.CgroupRoot}
	if err := s.jailVM(disks, m); err != nil {
		t.Fatalf("jailVM() = %v", err)
	}
	j := s.fc.jail
	for inJail, src := range map[string]string{"/vmlinux": r.cfg.Kernel.Vmlinux, "/initramfs.cpio": r.initramfs,
		"/disks/layer0.ext4": disks[0].path, "/disks/workspace.ext4": disks[1].path} {
		var a, b unix.Stat_t
		if unix.Stat(src, &a) != nil || unix.Stat(j.HostPath(inJail), &b) != nil || a.Ino != b.Ino {
			t.Errorf("%s in the jail is not %s", inJail, src)
		}
	}
	owner := func(p string) (uint32, uint32, uint32) {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid, st.Mode & 0o777
	}
	if u, g, m := owner(disks[0].path); u != 0 || g != 64055 || m != 0o640 {
		t.Errorf("read-only layer: %d:%d %o, want 0:64055 640", u, g, m)
	}
	if u, g, m := owner(disks[1].path); u != 64055 || g != 64055 || m != 0o600 {
		t.Errorf("workspace during the VM: %d:%d %o, want 64055:64055 600", u, g, m)
	}
	if u, _, _ := owner(j.HostPath(fcLog)); u != 64055 {
		t.Errorf("firecracker log owned by %d, want 64055", u)
	}
	if errs := s.fc.cleanup(); len(errs) > 0 {
		t.Fatalf("cleanup() = %v", errors.Join(errs...))
	}
	if u, g, m := owner(disks[1].path); u != 0 || g != 0 || m != 0o600 {
		t.Errorf("workspace after cleanup: %d:%d %o, want 0:0 600 back", u, g, m)
	}
	if _, err := os.Stat(j.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("jail after cleanup: %v, want removed", err)
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{`/run/helmr/a\040b`: "/run/helmr/a b", "/plain": "/plain", `/x\134y`: `/x\y`} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
