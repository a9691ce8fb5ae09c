package images

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// digestFile caches a base's content digest next to its rootfs. The base
// build script replaces the whole base directory, so a cached digest never
// outlives the tree it describes.
const digestFile = "rootfs.digest"

// BaseDigest returns the content digest of a built-in base's root
// filesystem ("sha256:…"): two workers with the same digest boot the same
// bytes, which is what restoring a checkpoint elsewhere needs. Computed once
// (about a second for a Debian base) and cached.
func (r *Resolver) BaseDigest(ref string) (string, error) {
	name, ok := strings.CutPrefix(ref, BasePrefix)
	if !ok || name == "" || strings.ContainsAny(name, "/:\\") || name == "." || name == ".." {
		return "", fmt.Errorf("%q is not a built-in base", ref)
	}
	dir := filepath.Join(r.BasesDir, name)
	if b, err := os.ReadFile(filepath.Join(dir, digestFile)); err == nil && strings.HasPrefix(string(b), "sha256:") {
		return strings.TrimSpace(string(b)), nil
	}
	d, err := TreeDigest(filepath.Join(dir, "rootfs"))
	if err != nil {
		return "", fmt.Errorf("digest of base %s: %w", ref, err)
	}
	tmp := filepath.Join(dir, digestFile+".tmp")
	if err := os.WriteFile(tmp, []byte(d+"\n"), 0o644); err == nil {
		_ = os.Rename(tmp, filepath.Join(dir, digestFile))
	}
	return d, nil
}

// TreeDigest hashes a directory tree: for every entry in lexical order, its
// relative path, type and permission bits, owner, and content (a regular
// file's bytes, a symlink's target, a device's number). Timestamps are
// left out, so the same tree built twice has the same digest.
func TreeDigest(root string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return errors.New("no stat data")
		}
		fmt.Fprintf(h, "%s\x00%o\x00%d:%d\x00", rel, info.Mode(), st.Uid, st.Gid)
		switch {
		case info.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			fh := sha256.New()
			_, err = io.Copy(fh, f)
			f.Close()
			if err != nil {
				return err
			}
			h.Write(fh.Sum(nil))
		case info.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			io.WriteString(h, t)
		case info.Mode()&(fs.ModeDevice|fs.ModeCharDevice) != 0:
			fmt.Fprintf(h, "%d", st.Rdev)
		}
		h.Write([]byte{0})
		return nil
	})
	if err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
