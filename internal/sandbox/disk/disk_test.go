package disk

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/testenv"
)

func TestDiskLimitsWrites(t *testing.T) {
	testenv.RequireRoot(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "ws")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const size = 16 << 20
	d, err := Create(filepath.Join(tmp, "ws.img"), dir, size, 1234, 1234)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ents, _ := os.ReadDir(dir)
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil || st.Uid != 1234 || st.Gid != 1234 || len(ents) != 0 {
		t.Errorf("fresh disk root: uid %d gid %d, entries %v (%v); want 1234:1234 and empty", st.Uid, st.Gid, ents, err)
	}
	if d.Full() {
		free, _ := d.Free()
		t.Errorf("a fresh disk is Full() with %d bytes free", free)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if !strings.Contains(string(mounts), dir+" ") || !strings.Contains(string(mounts), "nosuid,nodev") && !strings.Contains(string(mounts), "nodev") {
		t.Errorf("%s is not mounted nodev,nosuid", dir)
	}

	// Fill it: writes stop with ENOSPC within the size.
	f, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	var written int64
	for written < 4*size {
		n, err := f.Write(chunk)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write error %v, want ENOSPC", err)
			}
			break
		}
	}
	f.Close()
	if written >= size || written < size/2 {
		t.Errorf("wrote %d bytes into a %d-byte disk", written, size)
	}
	if !d.Full() {
		free, _ := d.Free()
		t.Errorf("Full() = false with %d bytes free", free)
	}
	// The image holds at most its size on the host.
	var ist syscall.Stat_t
	if err := syscall.Stat(d.Image, &ist); err != nil || ist.Blocks*512 > size {
		t.Errorf("image allocates %d bytes (%v), over its size %d", ist.Blocks*512, err, size)
	}
	if !Attached(d.Image) {
		t.Errorf("Attached(%s) = false while mounted", d.Image)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	// The kernel may release an autoclear loop device just after the
	// unmount returns.
	for deadline := time.Now().Add(5 * time.Second); Attached(d.Image); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("Attached(%s) = true 5s after Close", d.Image)
			break
		}
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("after Close the mountpoint shows %v", ents)
	}
	// The loop device goes with the mount (the kernel releases an
	// autoclear device asynchronously, so allow it a moment).
	backed := func() bool {
		loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
		for _, l := range loops {
			if b, _ := os.ReadFile(l); strings.TrimSpace(string(b)) == d.Image {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(10 * time.Second); backed(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("%s still backs a loop device 10 s after Close", d.Image)
			break
		}
	}
	// Its contents persist in the image: mounting it again shows the file.
	if err := d.mount(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "big")); err != nil || fi.Size() != written {
		t.Errorf("remounted: big = %v, %v; want %d bytes", fi, err, written)
	}
	if _, err := Create(filepath.Join(tmp, "tiny.img"), t.TempDir(), 1<<20, 0, 0); err == nil {
		t.Error("a 1 MiB disk was created")
	}
}

func TestFactoryDisksAreIndependent(t *testing.T) {
	testenv.RequireRoot(t)
	tmp := t.TempDir()
	f := NewFactory(filepath.Join(tmp, "templates"), 64<<20)
	var disks []*Disk
	for i := range 3 {
		dir := filepath.Join(tmp, "ws"+strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		d, err := f.Create(filepath.Join(tmp, "ws"+strconv.Itoa(i)+".img"), dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		disks = append(disks, d)
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("disk %d starts with %v", i, ents)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(d.Image, &st); err != nil || st.Size != 64<<20 || st.Blocks*512 > 8<<20 {
			t.Errorf("disk %d image: size %d, %d bytes allocated (%v); want 64 MiB, sparse", i, st.Size, st.Blocks*512, err)
		}
	}
	if err := os.WriteFile(filepath.Join(disks[0].Dir, "only-here"), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range disks[1:] {
		if _, err := os.Stat(filepath.Join(d.Dir, "only-here")); err == nil {
			t.Errorf("a file written to one disk shows in %s", d.Dir)
		}
		if free, err := d.Free(); err != nil || free < 48<<20 {
			t.Errorf("disk %s: %d bytes free (%v), want most of 64 MiB", d.Dir, free, err)
		}
	}
}

// TestRecover: an image left as a killed guest leaves it (its journal to
// replay: needs_recovery) cannot be mounted read-only until Recover ran;
// a clean image stays as it was; what is not a file system is an error.
func TestRecover(t *testing.T) {
	testenv.RequireRoot(t)
	_, err := exec.LookPath("debugfs")
	testenv.Require(t, err == nil, "needs debugfs (e2fsprogs)")
	for _, tc := range []struct {
		name    string
		dirty   bool // set needs_recovery, as a killed guest leaves it
		garbage bool
	}{
		{name: "clean"},
		{name: "unclean journal", dirty: true},
		{name: "not ext4", garbage: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			dir := filepath.Join(tmp, "ws")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			img := filepath.Join(tmp, "ws.img")
			if tc.garbage {
				if err := os.WriteFile(img, bytes.Repeat([]byte("junk"), 1<<20), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := Recover(img); err == nil {
					t.Fatal("Recover(junk) = nil, want an error")
				}
				return
			}
			d, err := Create(img, dir, 300<<20, 0, 0) // large enough for a journal
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "kept"), []byte("yes"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := d.Detach(); err != nil || d.Dir != "" {
				t.Fatalf("Detach() = %v, Dir %q; want unmounted", err, d.Dir)
			}
			if tc.dirty {
				if out, err := exec.Command("debugfs", "-w", "-R", "feature needs_recovery", img).CombinedOutput(); err != nil {
					t.Fatalf("debugfs: %v: %s", err, out)
				}
				if d, err := Mount(img, dir, true); err == nil {
					d.Close()
					t.Fatal("a read-only mount of an unclean image worked; the test shows nothing")
				}
			}
			if err := Recover(img); err != nil {
				t.Fatalf("Recover() = %v", err)
			}
			ro, err := Mount(img, dir, true)
			if err != nil {
				t.Fatalf("read-only Mount after Recover: %v", err)
			}
			defer ro.Close()
			if b, err := os.ReadFile(filepath.Join(dir, "kept")); err != nil || string(b) != "yes" {
				t.Errorf("kept = %q, %v after Recover; want yes", b, err)
			}
		})
	}
}

// TestUnmounted: a Disk mounted nowhere knows its image and size, and
// its Close and Full touch nothing.
func TestUnmounted(t *testing.T) {
	img := filepath.Join(t.TempDir(), "ws.img")
	if err := os.WriteFile(img, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := Unmounted(img)
	if err != nil || d.Image != img || d.Size != 4096 || d.Dir != "" {
		t.Fatalf("Unmounted(%q) = %+v, %v; want the image, 4096 bytes, no dir", img, d, err)
	}
	if err := d.Close(); err != nil || d.Full() {
		t.Errorf("Close() = %v, Full() = %v; want nil, false", err, d.Full())
	}
	if _, err := Unmounted(img + ".missing"); err == nil {
		t.Error("Unmounted(missing) = nil error")
	}
}
