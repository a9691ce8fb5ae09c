package guestfmt

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// File is one entry of an initramfs.
type File struct {
	// Name is the path inside the archive, without a leading slash.
	Name string
	// Mode holds the permission bits; Dir marks a directory.
	Mode uint32
	Dir  bool
	// Source is the host file whose bytes the entry holds (regular files).
	Source string
}

// WriteInitramfs writes files as an uncompressed cpio archive in the "newc"
// format the kernel unpacks into its initial root (rootfs). Parent
// directories missing from files are added (0755), entries are written
// parents first, and every entry belongs to root.
func WriteInitramfs(w io.Writer, files []File) error {
	byName := map[string]File{}
	for _, f := range files {
		name := strings.Trim(path.Clean("/"+f.Name), "/")
		if name == "" {
			return fmt.Errorf("initramfs: bad entry name %q", f.Name)
		}
		f.Name = name
		byName[name] = f
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if _, ok := byName[d]; !ok {
				byName[d] = File{Name: d, Mode: 0o755, Dir: true}
			}
		}
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names) // a parent sorts before what it holds
	bw := bufio.NewWriter(w)
	ino := uint32(1)
	for _, n := range names {
		f := byName[n]
		var data []byte
		mode := f.Mode & 0o7777
		if f.Dir {
			mode |= 0o040000
		} else {
			b, err := os.ReadFile(f.Source)
			if err != nil {
				return fmt.Errorf("initramfs: %w", err)
			}
			data, mode = b, mode|0o100000
		}
		if err := writeEntry(bw, ino, mode, n, data); err != nil {
			return err
		}
		ino++
	}
	if err := writeEntry(bw, 0, 0, "TRAILER!!!", nil); err != nil {
		return err
	}
	return bw.Flush()
}

// writeEntry writes one newc header, name and data, each padded to 4 bytes.
func writeEntry(w *bufio.Writer, ino, mode uint32, name string, data []byte) error {
	nlink := uint32(1)
	if mode&0o040000 != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	if _, err := w.WriteString(hdr + name + "\x00"); err != nil {
		return err
	}
	if err := pad(w, len(hdr)+len(name)+1); err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		return err
	}
	return pad(w, len(data))
}

func pad(w *bufio.Writer, n int) error {
	if r := n % 4; r != 0 {
		_, err := w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}
