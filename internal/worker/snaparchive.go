package worker

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// A workspace snapshot's archive, compressed (gzip, fastest: a fresh
// filesystem's metadata shrinks a hundredfold) and sealed as one stream: a
// tar of
//
//	snapshot.json       snapshotManifest
//	workspace.extents   a workspace disk image, sparse (see addExtents)
//	files/<path>        or a plain directory workspace's tree
//
// A directory keeps its directories, regular files and symbolic links
// with their modes, owners and modification times; hard links become
// copies, and FIFOs, sockets, devices and extended attributes are left
// out (a sandbox's workspace has no use for them across hosts).
const (
	snapshotManifestName = "snapshot.json"
	filesPrefix          = "files/"
)

// Snapshot kinds: what the workspace's files are on the worker that
// saved them.
const (
	kindDisk = "disk" // a filesystem image under a quota
	kindDir  = "dir"  // a plain directory (HELMR_WORKSPACE_QUOTA=0)
)

// snapshotManifest says what a snapshot holds.
type snapshotManifest struct {
	Workspace string `json:"workspace"`
	Kind      string `json:"kind"`
}

// writeSnapshot writes the archive of workspace id's files at p: its
// image (p ends in .img) or its directory.
func writeSnapshot(w io.Writer, id, p string) error {
	gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err := writeSnapshotTar(gz, id, p); err != nil {
		return err
	}
	return gz.Close()
}

func writeSnapshotTar(w io.Writer, id, p string) error {
	tw := tar.NewWriter(w)
	m := snapshotManifest{Workspace: id, Kind: kindDir}
	if strings.HasSuffix(p, ".img") {
		m.Kind = kindDisk
	}
	data, _ := json.Marshal(m)
	if err := addBytes(tw, snapshotManifestName, data); err != nil {
		return err
	}
	var err error
	if m.Kind == kindDisk {
		err = addExtents(tw, p)
	} else {
		err = addTree(tw, p)
	}
	if err != nil {
		return err
	}
	return tw.Close()
}

// addTree adds the tree at root under files/, never following a symbolic
// link.
func addTree(tw *tar.Writer, root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		name := filesPrefix + filepath.ToSlash(rel)
		var link string
		switch {
		case info.IsDir():
			name += "/"
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case !info.Mode().IsRegular():
			return nil // FIFO, socket or device: left out
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name, h.Uname, h.Gname = name, "", ""
		h.Format = tar.FormatPAX // nanosecond times, long names
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, h.Size); err != nil {
			return fmt.Errorf("workspace file %s: %w", rel, err)
		}
		return nil
	})
}

// readSnapshot unpacks a snapshot archive (authenticated as it is read)
// of workspace id into dir, an empty directory: the image dir/ws.img or
// the tree dir/files. It returns that path.
func readSnapshot(r io.Reader, id, dir string) (string, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return "", fmt.Errorf("workspace snapshot: %w", err)
	}
	gz.Multistream(false)
	tr := tar.NewReader(gz)
	h, err := tr.Next()
	if err != nil {
		return "", fmt.Errorf("workspace snapshot: %w", err)
	}
	var m snapshotManifest
	if h.Name != snapshotManifestName {
		return "", fmt.Errorf("workspace snapshot: starts with %q, not its manifest", h.Name)
	}
	if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&m); err != nil {
		return "", fmt.Errorf("workspace snapshot manifest: %w", err)
	}
	if m.Workspace != id {
		return "", fmt.Errorf("workspace snapshot is of workspace %q, not %s", m.Workspace, id)
	}
	switch m.Kind {
	case kindDisk:
		img := filepath.Join(dir, "ws.img")
		h, err := tr.Next()
		if err != nil || h.Name != extentsName {
			return "", fmt.Errorf("workspace snapshot: the disk image is missing (%v)", err)
		}
		if err := readExtents(tr, img); err != nil {
			return "", err
		}
		if _, err := tr.Next(); !errors.Is(err, io.EOF) {
			return "", fmt.Errorf("workspace snapshot: unexpected content after the disk image (%v)", err)
		}
		return img, nil
	case kindDir:
		tree := filepath.Join(dir, "files")
		if err := os.Mkdir(tree, 0o700); err != nil {
			return "", err
		}
		return tree, readTree(tr, tree)
	}
	return "", fmt.Errorf("workspace snapshot: unknown kind %q", m.Kind)
}

// readTree unpacks the files/ entries of tr into root: every path stays
// inside it (os.Root), whatever the archive's names or links say.
func readTree(tr *tar.Reader, root string) error {
	rt, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer rt.Close()
	type dirMeta struct {
		name string
		h    *tar.Header
	}
	var dirs []dirMeta // given their modes and times last, deepest first
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("workspace snapshot: %w", err)
		}
		rel, ok := strings.CutPrefix(h.Name, filesPrefix)
		rel = path.Clean("/" + rel)[1:]
		if !ok || strings.HasPrefix(h.Name, "/") {
			return fmt.Errorf("workspace snapshot: bad entry %q", h.Name)
		}
		if rel == "" {
			rel = "."
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if rel != "." {
				if err := rt.Mkdir(rel, 0o700); err != nil {
					return fmt.Errorf("workspace snapshot: %w", err)
				}
			}
			dirs = append(dirs, dirMeta{rel, h})
			continue
		case tar.TypeReg:
			f, err := rt.OpenFile(rel, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return fmt.Errorf("workspace snapshot: %w", err)
			}
			_, err = io.Copy(f, tr)
			if err = errors.Join(err, f.Close()); err != nil {
				return fmt.Errorf("workspace snapshot: %s: %w", rel, err)
			}
			if err := setMeta(rt, rel, h); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := rt.Symlink(h.Linkname, rel); err != nil {
				return fmt.Errorf("workspace snapshot: %w", err)
			}
			if err := rt.Lchown(rel, h.Uid, h.Gid); err != nil {
				return fmt.Errorf("workspace snapshot: %w", err)
			}
		default:
			return fmt.Errorf("workspace snapshot: entry %q of unexpected type %q", h.Name, h.Typeflag)
		}
	}
	for _, d := range slices.Backward(dirs) {
		if err := setMeta(rt, d.name, d.h); err != nil {
			return err
		}
	}
	return nil
}

// setMeta gives a restored file or directory its owner, mode and times
// (owner first: a chown clears setuid bits).
func setMeta(rt *os.Root, name string, h *tar.Header) error {
	mode := fs.FileMode(h.Mode).Perm()
	if h.Mode&04000 != 0 {
		mode |= fs.ModeSetuid
	}
	if h.Mode&02000 != 0 {
		mode |= fs.ModeSetgid
	}
	if h.Mode&01000 != 0 {
		mode |= fs.ModeSticky
	}
	atime := h.AccessTime
	if atime.IsZero() {
		atime = h.ModTime
	}
	err := errors.Join(rt.Lchown(name, h.Uid, h.Gid), rt.Chmod(name, mode), rt.Chtimes(name, atime, h.ModTime))
	if err != nil {
		return fmt.Errorf("workspace snapshot: %s: %w", name, err)
	}
	return nil
}

// treeFingerprint is what a workspace's files look like from their
// metadata (see fingerprint).
type treeFingerprint struct {
	Sum string
	// Racy: an entry changed so recently that a change after this look
	// might leave its times as they are (the filesystem's timestamps are
	// coarse): the fingerprint cannot tell that workspace unchanged.
	Racy bool
}

// racyWindow is how close to the look a change makes a fingerprint racy:
// above the coarsest timestamps (ext4 with small inodes: one second).
// (A variable for tests.)
var racyWindow = 2 * time.Second

// fingerprint walks the tree at root (without following links) and sums
// every entry's path, type, mode, owner, size, link, inode and its
// modification and change times. Any write, chmod, chown, rename, link or
// removal changes an entry's change time (which no process can set back),
// so a workspace whose fingerprint is the one saved with its snapshot,
// and was not racy then, is that snapshot.
func fingerprint(root string) (treeFingerprint, error) {
	h := sha256.New()
	now := time.Now()
	var racy bool
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return errors.New("no stat information")
		}
		rel, _ := filepath.Rel(root, p)
		var link string
		if info.Mode()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		ctime := time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
		if now.Sub(ctime) < racyWindow {
			racy = true
		}
		fmt.Fprintf(h, "%q %o %d:%d %d %q %d %d %d %d %d\n", rel, uint32(info.Mode()), st.Uid, st.Gid, info.Size(), link,
			st.Ino, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		return nil
	})
	if err != nil {
		return treeFingerprint{}, err
	}
	return treeFingerprint{Sum: hex.EncodeToString(h.Sum(nil)), Racy: racy}, nil
}
