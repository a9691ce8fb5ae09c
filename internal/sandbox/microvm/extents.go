package microvm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// A disk in a checkpoint is kept as its data extents: a sparse image of
// gigabytes (a workspace's quota) whose file system uses megabytes would
// otherwise be read, digested, compressed and sealed whole. The format:
//
//	"HELMRDISK1\n" size:u64
//	{ offset:u64 length:u64 data[length] }*   ascending, not overlapping
//	offset = 2^64-1                            end
//
// big endian. Reading it back makes a sparse file of size with the data
// in place and holes elsewhere.
const (
	extentsMagic = "HELMRDISK1\n"
	extentsEnd   = ^uint64(0)
)

// writeExtents writes the disk image at src to dst in the extents format.
func writeExtents(dst, src string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	w := bufio.NewWriterSize(out, 1<<20)
	hdr := make([]byte, 16)
	put := func(a, b uint64) error {
		binary.BigEndian.PutUint64(hdr[0:], a)
		binary.BigEndian.PutUint64(hdr[8:], b)
		_, err := w.Write(hdr)
		return err
	}
	if _, err := w.WriteString(extentsMagic); err != nil {
		return err
	}
	if _, err := w.Write(binary.BigEndian.AppendUint64(nil, uint64(fi.Size()))); err != nil {
		return err
	}
	fd := int(in.Fd())
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return fmt.Errorf("seek data in %s: %w", src, err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole in %s: %w", src, err)
		}
		if err := put(uint64(data), uint64(hole-data)); err != nil {
			return err
		}
		if _, err := io.Copy(w, io.NewSectionReader(in, data, hole-data)); err != nil {
			return fmt.Errorf("copy %s: %w", src, err)
		}
		off = hole
	}
	if err := put(extentsEnd, 0); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return out.Sync()
}

// readExtents replaces the file at dst (made if missing) with the disk
// image that the extents file at src holds, and returns its size.
func readExtents(dst, src string) (size int64, err error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	r := bufio.NewReaderSize(in, 1<<20)
	magic := make([]byte, len(extentsMagic)+8)
	if _, err := io.ReadFull(r, magic); err != nil || string(magic[:len(extentsMagic)]) != extentsMagic {
		return 0, fmt.Errorf("%s is no disk extents file", src)
	}
	size = int64(binary.BigEndian.Uint64(magic[len(extentsMagic):]))
	if size < 0 {
		return 0, fmt.Errorf("%s: bad size", src)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	// Emptied first: what the file held before must not show through
	// the image's holes.
	if err := out.Truncate(0); err != nil {
		return 0, err
	}
	if err := out.Truncate(size); err != nil {
		return 0, err
	}
	hdr := make([]byte, 16)
	next := int64(0)
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			return 0, fmt.Errorf("%s: %w", src, err)
		}
		off, n := binary.BigEndian.Uint64(hdr[0:]), binary.BigEndian.Uint64(hdr[8:])
		if off == extentsEnd {
			break
		}
		if int64(off) < next || n > uint64(size) || int64(off) > size-int64(n) {
			return 0, fmt.Errorf("%s: extent %d+%d out of order or past the disk's %d bytes", src, off, n, size)
		}
		if _, err := io.CopyN(io.NewOffsetWriter(out, int64(off)), r, int64(n)); err != nil {
			return 0, fmt.Errorf("%s: %w", src, err)
		}
		next = int64(off + n)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return 0, fmt.Errorf("%s: data after the end", src)
	}
	return size, out.Sync()
}
