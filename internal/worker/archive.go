package worker

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/s2"
	"golang.org/x/sys/unix"
)

// A parked run's archive, sealed as one stream: a tar of
//
//	manifest.json        parkManifest
//	checkpoint/<file>    the runtime's checkpoint image (flat directory)
//	workspace.extents    the workspace disk image, sparse (see writeExtents)
//
// compressed as an S2 stream (klauspost/compress/s2) before it is sealed.
// The workspace image is mostly holes (a sparse file the size of the
// quota): only its data extents are stored, as [offset u64][length u64]
// [bytes] records after the image's size (u64), all big-endian.
//
// Why S2: a checkpoint's memory pages and a workspace disk's metadata
// shrink to about a quarter (bench/park's node sandbox: 16 MiB to 4 MiB)
// at over 1 GB/s on one core, and every byte saved is a byte the upload,
// the blob store (an S3 server takes some 5 ms a MiB here) and the
// restore's download do not carry. zstd's fastest level shrinks a little
// more at three times the CPU. readArchive also reads the plain tar of
// checkpoints parked before archives were compressed.
const (
	manifestName = "manifest.json"
	imagePrefix  = "checkpoint/"
	extentsName  = "workspace.extents"
)

// parkManifest is what a restoring worker needs besides the checkpoint
// record.
type parkManifest struct {
	// SandboxID is the checkpointed sandbox's id (the runtime restores the
	// container under it).
	SandboxID string `json:"sandboxId"`
	// MaxDurationLeftMs is what was left of the run's maxDuration (its
	// clock stops while the run waits).
	MaxDurationLeftMs int64 `json:"maxDurationLeftMs"`
	// CA is the sandbox's certificate authority (certificate and key,
	// PEM), which its trust stores hold; Placeholders are the
	// placeholders of its egress-bound credentials, by name. The archive
	// is sealed: neither leaves the worker in the clear.
	CA           []byte            `json:"ca,omitempty"`
	Placeholders map[string]string `json:"placeholders,omitempty"`
}

type extent struct{ off, len int64 }

// dataExtents lists the data regions of f (SEEK_DATA / SEEK_HOLE).
func dataExtents(f *os.File, size int64) ([]extent, error) {
	var out []extent
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		start, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return nil, fmt.Errorf("seek data: %w", err)
		}
		end, err := unix.Seek(fd, start, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("seek hole: %w", err)
		}
		out = append(out, extent{start, end - start})
		off = end
	}
	return out, nil
}

// s2Magic starts an S2 stream (its stream identifier chunk); a plain tar
// archive starts with its first entry's name.
var s2Magic = []byte("\xff\x06\x00\x00S2sTwO")

// writeArchive writes the archive of a parked run to w, compressed; without
// workspaceImage, that of a paused workspace (the checkpoint only).
func writeArchive(w io.Writer, m parkManifest, imageDir, workspaceImage string) error {
	zw := s2.NewWriter(w)
	err := writeTar(zw, m, imageDir, workspaceImage)
	return errors.Join(err, zw.Close())
}

// writeTar writes the archive's tar to w.
func writeTar(w io.Writer, m parkManifest, imageDir, workspaceImage string) error {
	tw := tar.NewWriter(w)
	mdata, _ := json.Marshal(m)
	if err := addBytes(tw, manifestName, mdata); err != nil {
		return err
	}
	ents, err := os.ReadDir(imageDir)
	if err != nil {
		return fmt.Errorf("read checkpoint image: %w", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			return fmt.Errorf("checkpoint image: %s is not a regular file", e.Name())
		}
		if err := addFile(tw, imagePrefix+e.Name(), filepath.Join(imageDir, e.Name())); err != nil {
			return err
		}
	}
	if workspaceImage != "" {
		if err := addExtents(tw, workspaceImage); err != nil {
			return err
		}
	}
	return tw.Close()
}

func addBytes(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func addFile(tw *tar.Writer, name, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o600, Size: fi.Size(), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

func addExtents(tw *tar.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("workspace image: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	exts, err := dataExtents(f, fi.Size())
	if err != nil {
		return fmt.Errorf("workspace image %s: %w", p, err)
	}
	total := int64(8)
	for _, e := range exts {
		total += 16 + e.len
	}
	if err := tw.WriteHeader(&tar.Header{Name: extentsName, Mode: 0o600, Size: total, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	var hdr [16]byte
	binary.BigEndian.PutUint64(hdr[:8], uint64(fi.Size()))
	if _, err := tw.Write(hdr[:8]); err != nil {
		return err
	}
	for _, e := range exts {
		binary.BigEndian.PutUint64(hdr[:8], uint64(e.off))
		binary.BigEndian.PutUint64(hdr[8:], uint64(e.len))
		if _, err := tw.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := io.Copy(tw, io.NewSectionReader(f, e.off, e.len)); err != nil {
			return err
		}
	}
	return nil
}

// readArchive unpacks an archive (authenticated already) into imageDir and
// the workspace image file at workspaceImage ("": the archive holds no
// workspace, as a paused workspace's, whose files are its snapshot).
func readArchive(r io.Reader, imageDir, workspaceImage string) (parkManifest, error) {
	var m parkManifest
	var sawManifest, sawImage, sawWorkspace bool
	br := bufio.NewReader(r)
	var src io.Reader = br
	if head, _ := br.Peek(len(s2Magic)); bytes.Equal(head, s2Magic) {
		src = s2.NewReader(br)
	}
	tr := tar.NewReader(src)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("checkpoint archive: %w", err)
		}
		switch {
		case h.Name == manifestName:
			if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&m); err != nil {
				return m, fmt.Errorf("checkpoint manifest: %w", err)
			}
			sawManifest = true
		case strings.HasPrefix(h.Name, imagePrefix):
			name := strings.TrimPrefix(h.Name, imagePrefix)
			if name == "" || name != path.Base(name) || name == "." || name == ".." {
				return m, fmt.Errorf("checkpoint archive: bad entry %q", h.Name)
			}
			if err := writeTo(filepath.Join(imageDir, name), tr); err != nil {
				return m, err
			}
			sawImage = true
		case h.Name == extentsName && workspaceImage != "":
			if err := readExtents(tr, workspaceImage); err != nil {
				return m, err
			}
			sawWorkspace = true
		default:
			return m, fmt.Errorf("checkpoint archive: unknown entry %q", h.Name)
		}
	}
	if !sawManifest || !sawImage || sawWorkspace != (workspaceImage != "") || m.SandboxID == "" {
		return m, errors.New("checkpoint archive is incomplete (manifest, image or workspace missing)")
	}
	return m, nil
}

func writeTo(p string, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r)
	return errors.Join(err, f.Close())
}

func readExtents(r io.Reader, p string) error {
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:8]); err != nil {
		return fmt.Errorf("workspace extents: %w", err)
	}
	size := int64(binary.BigEndian.Uint64(hdr[:8]))
	tmp := p + ".restoring"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	err = func() error {
		if err := f.Truncate(size); err != nil {
			return err
		}
		for {
			if _, err := io.ReadFull(r, hdr[:]); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return fmt.Errorf("workspace extents: %w", err)
			}
			off, n := int64(binary.BigEndian.Uint64(hdr[:8])), int64(binary.BigEndian.Uint64(hdr[8:]))
			if off < 0 || n < 0 || off+n > size {
				return fmt.Errorf("workspace extent %d+%d outside the image's %d bytes", off, n, size)
			}
			if _, err := io.Copy(io.NewOffsetWriter(f, off), io.LimitReader(r, n)); err != nil {
				return err
			}
		}
	}()
	if err = errors.Join(err, f.Close()); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}
