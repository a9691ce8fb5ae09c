package guestfmt

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// entry is one parsed newc record.
type entry struct {
	Name string
	Mode uint32
	Data string
}

// parseNewc reads a newc archive up to its trailer.
func parseNewc(t *testing.T, b []byte) []entry {
	t.Helper()
	var out []entry
	align := func(n int) int { return (n + 3) &^ 3 }
	for off := 0; ; {
		if len(b) < off+110 || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at %d", off)
		}
		field := func(i int) int {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("header field %d at %d: %v", i, off, err)
			}
			return int(v)
		}
		mode, size, nameLen := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+nameLen-1])
		data := align(off + 110 + nameLen)
		if name == "TRAILER!!!" {
			return out
		}
		out = append(out, entry{name, uint32(mode), string(b[data : data+size])})
		off = align(data + size)
	}
}

func TestWriteInitramfs(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "agent")
	if err := os.WriteFile(src, []byte("agent bytes"), 0o755); err != nil {
		t.Fatal(err)
	}
	mod := filepath.Join(dir, "m.ko")
	if err := os.WriteFile(mod, []byte("module!"), 0o644); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	err := WriteInitramfs(&buf, []File{
		{Name: "/modules/m.ko", Mode: 0o644, Source: mod},
		{Name: "init", Mode: 0o755, Source: src},
	})
	if err != nil {
		t.Fatalf("WriteInitramfs() = %v", err)
	}
	want := []entry{
		{"init", 0o100755, "agent bytes"},
		{"modules", 0o40755, ""},
		{"modules/m.ko", 0o100644, "module!"},
	}
	if diff := cmp.Diff(want, parseNewc(t, buf.Bytes())); diff != "" {
		t.Errorf("archive entries (-want +got):\n%s", diff)
	}
	if err := WriteInitramfs(&buf, []File{{Name: "/", Mode: 0o755, Dir: true}}); err == nil {
		t.Error("WriteInitramfs(entry named /) = nil, want an error")
	}
}

func TestFindKernel(t *testing.T) {
	cache := t.TempDir()
	if _, err := FindKernel(cache); err == nil {
		t.Error("FindKernel(empty cache) = nil error, want one naming install-microvm.sh")
	}
	dir := filepath.Join(cache, "microvm", "6.1.0-test")
	if err := os.MkdirAll(filepath.Join(dir, "modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"vmlinuz": "bz", "vmlinux": "elf", "modules/order": "a.ko\nb.ko\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("6.1.0-test", filepath.Join(cache, "microvm", "current")); err != nil {
		t.Fatal(err)
	}
	k, err := FindKernel(cache)
	if err != nil {
		t.Fatalf("FindKernel() = %v", err)
	}
	if k.Version != "6.1.0-test" || len(k.Modules) != 2 || filepath.Base(k.Modules[1]) != "b.ko" {
		t.Errorf("FindKernel() = %+v, want version 6.1.0-test and modules a.ko, b.ko", k)
	}
	if err := os.WriteFile(filepath.Join(dir, "modules/order"), []byte("../evil.ko\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FindKernel(cache); err == nil {
		t.Error("FindKernel(order naming ../evil.ko) = nil error, want a bad module name")
	}
}
