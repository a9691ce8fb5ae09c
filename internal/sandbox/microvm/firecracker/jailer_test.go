package firecracker

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/testenv"
)

func exampleJail(base string) *Jail {
	return &Jail{
		ID: "h0123456789abcdef", Jailer: "/usr/local/bin/jailer", Firecracker: "/usr/local/bin/firecracker",
		UID: 64055, GID: 64055, ChrootBase: base, CgroupVersion: 2, CgroupParent: "helmr-microvm",
		Cgroups: []string{"memory.max=1073741824", "cpu.max=100000 100000", "pids.max=256"},
		Netns:   "/run/helmr/microvm/netns/h0123456789abcdef",
	}
}

func TestJailArgs(t *testing.T) {
	j := exampleJail("/run/helmr/microvm/w1/jail")
	want := []string{
		"--id", "h0123456789abcdef", "--exec-file", "/usr/local/bin/firecracker", "--uid", "64055", "--gid", "64055",
		"--chroot-base-dir", "/run/helmr/microvm/w1/jail", "--cgroup-version", "2", "--parent-cgroup", "helmr-microvm",
		"--cgroup", "memory.max=1073741824", "--cgroup", "cpu.max=100000 100000", "--cgroup", "pids.max=256",
		"--netns", "/run/helmr/microvm/netns/h0123456789abcdef",
		"--", "--api-sock", "/api.sock",
	}
	if diff := cmp.Diff(want, j.Args()); diff != "" {
		t.Errorf("Args() (-want +got):\n%s", diff)
	}
	if err := j.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	if got, want := j.Root(), "/run/helmr/microvm/w1/jail/firecracker/h0123456789abcdef/root"; got != want {
		t.Errorf("Root() = %q, want %q", got, want)
	}
	if got, want := j.HostPath("../../etc/passwd"), j.Root()+"/etc/passwd"; got != want {
		t.Errorf("HostPath(../../etc/passwd) = %q, want %q (inside the jail)", got, want)
	}
	if got := j.CgroupDirs("/sys/fs/cgroup"); !cmp.Equal(got, []string{"/sys/fs/cgroup/helmr-microvm/h0123456789abcdef"}) {
		t.Errorf("CgroupDirs(v2) = %q", got)
	}
	j.CgroupVersion = 1
	j.Cgroups = []string{"memory.limit_in_bytes=1", "cpu.cfs_quota_us=1", "cpu.cfs_period_us=1"}
	if got := j.CgroupDirs("/sys/fs/cgroup"); !cmp.Equal(got, []string{"/sys/fs/cgroup/memory/helmr-microvm/h0123456789abcdef",
		"/sys/fs/cgroup/cpu/helmr-microvm/h0123456789abcdef"}) {
		t.Errorf("CgroupDirs(v1) = %q", got)
	}
}

func TestJailValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Jail)
	}{
		{"id with underscore", func(j *Jail) { j.ID = "sb_1" }},
		{"id too long", func(j *Jail) { j.ID = strings.Repeat("a", 65) }},
		{"relative jailer", func(j *Jail) { j.Jailer = "jailer" }},
		{"exec file not named firecracker", func(j *Jail) { j.Firecracker = "/usr/bin/fc" }},
		{"cgroup version 3", func(j *Jail) { j.CgroupVersion = 3 }},
		{"root", func(j *Jail) { j.UID = 0 }},
		{"cgroup without value", func(j *Jail) { j.Cgroups = []string{"memory.max"} }},
		{"cgroup path", func(j *Jail) { j.Cgroups = []string{"../x=1"} }},
	}
	for _, tt := range tests {
		j := exampleJail("/base")
		tt.edit(j)
		if err := j.Validate(); err == nil {
			t.Errorf("Validate(%s) = nil, want an error", tt.name)
		}
	}
}

// TestJailPlace: a file on the jail's file system is hard linked in; the
// jail's directory goes with Remove, the source stays.
func TestJailPlace(t *testing.T) {
	base := t.TempDir()
	j := exampleJail(filepath.Join(base, "jail"))
	if os.Geteuid() == 0 {
		if err := j.Prepare(); err != nil {
			t.Fatalf("Prepare() = %v", err)
		}
		var st unix.Stat_t
		if err := unix.Stat(j.HostPath(SnapshotDir), &st); err != nil || st.Uid != 64055 || st.Mode&0o777 != 0o700 {
			t.Errorf("snapshot dir: uid %d mode %o (%v), want one of Firecracker's uid, 0700", st.Uid, st.Mode&0o777, err)
		}
	} else if err := os.MkdirAll(j.Root(), 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(base, "layer.ext4")
	if err := os.WriteFile(src, []byte("ext4"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := j.Place(src, "/disks/layer0.ext4", true); err != nil {
		t.Fatalf("Place() = %v", err)
	}
	var a, b unix.Stat_t
	if unix.Stat(src, &a) != nil || unix.Stat(j.HostPath("/disks/layer0.ext4"), &b) != nil || a.Ino != b.Ino {
		t.Errorf("placed file is not a hard link of %s", src)
	}
	if err := j.Remove(); err != nil {
		t.Fatalf("Remove() = %v", err)
	}
	if _, err := os.Stat(j.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("jail dir after Remove: %v, want gone", err)
	}
	if b, err := os.ReadFile(src); err != nil || string(b) != "ext4" {
		t.Errorf("source after Remove = %q, %v; want kept", b, err)
	}
}

// TestJailPlaceBind: a file on another file system is bind mounted, read
// only if asked, and unmounted by Remove.
func TestJailPlaceBind(t *testing.T) {
	testenv.RequireRoot(t)
	// The other file system: a tmpfs of the test's own.
	other := t.TempDir()
	if err := unix.Mount("tmpfs", other, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(other, unix.MNT_DETACH) })
	base := t.TempDir()
	j := exampleJail(filepath.Join(base, "jail"))
	if err := j.Prepare(); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(other, "workspace.ext4")
	if err := os.WriteFile(src, []byte("workspace"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := j.Place(src, "/disks/workspace.ext4", true); err != nil {
		t.Fatalf("Place() = %v", err)
	}
	placed := j.HostPath("/disks/workspace.ext4")
	if b, err := os.ReadFile(placed); err != nil || string(b) != "workspace" {
		t.Errorf("placed file reads %q, %v; want the source's bytes", b, err)
	}
	if err := os.WriteFile(placed, []byte("x"), 0o600); !errors.Is(err, unix.EROFS) {
		t.Errorf("write to a read-only placed file = %v, want EROFS", err)
	}
	if err := j.Remove(); err != nil {
		t.Fatalf("Remove() = %v", err)
	}
	if b, err := os.ReadFile(src); err != nil || string(b) != "workspace" {
		t.Errorf("source after Remove = %q, %v; want kept", b, err)
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		out  string
		want Version
	}{
		{"Firecracker v1.10.1\n\nSupported snapshot data format versions: v5.0.0\n", Version{1, 10, 1}},
		{"Jailer v1.8.0\n", Version{1, 8, 0}},
		{"firecracker 1.12.0-dev", Version{1, 12, 0}},
	}
	for _, tt := range tests {
		if got, err := ParseVersion(tt.out); err != nil || got != tt.want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", tt.out, got, err, tt.want)
		}
	}
	if _, err := ParseVersion("no version here"); err == nil {
		t.Error("ParseVersion(no version) = nil error")
	}
}

func TestInstallUsable(t *testing.T) {
	tests := []struct {
		in   Install
		want string // substring of the error; empty: usable
	}{
		{Install{}, "no firecracker binary, no jailer binary"},
		{Install{Firecracker: "/f"}, "no jailer binary"},
		{Install{Firecracker: "/f", Jailer: "/j", Version: Version{1, 10, 1}, JailerVersion: Version{1, 10, 1}}, ""},
		{Install{Firecracker: "/f", Jailer: "/j", Version: Version{1, 10, 1}, JailerVersion: Version{1, 9, 0}}, "differ"},
		{Install{Firecracker: "/f", Jailer: "/j", Version: Version{1, 7, 0}, JailerVersion: Version{1, 7, 0}}, "older than 1.8.0"},
		{Install{Firecracker: "/f", Jailer: "/j", Err: errors.New("exec format error")}, "exec format error"},
	}
	for _, tt := range tests {
		err := tt.in.Usable()
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%+v.Usable() = %v, want %q", tt.in, err, tt.want)
		}
	}
}

// TestFind finds binaries in the given directories and asks their
// versions (here: scripts standing in for them).
func TestFind(t *testing.T) {
	dir := t.TempDir()
	for name, out := range map[string]string{"firecracker": "Firecracker v1.10.1", "jailer": "Jailer v1.10.1"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho '"+out+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", t.TempDir())
	in := Find(dir)
	want := Install{Firecracker: filepath.Join(dir, "firecracker"), Jailer: filepath.Join(dir, "jailer"),
		Version: Version{1, 10, 1}, JailerVersion: Version{1, 10, 1}}
	if in != want || in.Usable() != nil {
		t.Errorf("Find() = %+v (%v), want %+v", in, in.Usable(), want)
	}
	if got := Find(t.TempDir()); got.Firecracker != "" || got.Usable() == nil {
		t.Errorf("Find(empty) = %+v, want nothing found", got)
	}
}
