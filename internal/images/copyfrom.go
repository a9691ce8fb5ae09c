package images

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/deployments"
)

// copyFromLayer makes the layer of a copyFrom step: src out of the
// (already prepared) image from, as its layers merge, placed at dest over
// img. As Dockerfile's COPY --from, a directory's contents go into dest, a
// file becomes dest (or dest/<name> when dest ends in "/"). Modes, owners,
// symlinks and times are kept.
func (r *Resolver) copyFromLayer(key string, img, from Image, s deployments.Step) (string, error) {
	dir := filepath.Join(r.LayersDir, "copyfrom-"+key)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if _, ok := from.Lookup(s.Src); !ok {
		return "", fmt.Errorf("%s is not in the source image", s.Src)
	}
	root, unmount, err := mergedView(from.Layers)
	if err != nil {
		return "", err
	}
	defer unmount()
	if err := os.MkdirAll(r.LayersDir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(r.LayersDir, ".copyfrom-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(root, filepath.FromSlash(path.Clean(s.Src)))
	fi, err := os.Lstat(src)
	if err != nil {
		return "", err
	}
	dest := path.Clean(s.Dest)
	if !fi.IsDir() && strings.HasSuffix(s.Dest, "/") {
		dest = path.Join(dest, path.Base(s.Src))
	}
	parent := path.Dir(dest)
	if fi.IsDir() {
		parent = dest
	}
	if err := layerDirs(tmp, img, parent, 0, 0); err != nil {
		return "", err
	}
	if fi.IsDir() {
		err = copyTree(src, filepath.Join(tmp, filepath.FromSlash(dest)), true)
	} else {
		err = copyEntry(src, filepath.Join(tmp, filepath.FromSlash(dest)), fi)
	}
	if err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(dir); statErr != nil {
			return "", err
		}
	}
	return dir, nil
}

// mergedView returns a directory showing layers merged (a read-only
// overlay mount when there is more than one) and how to release it.
func mergedView(layers []string) (string, func(), error) {
	if len(layers) == 1 {
		return layers[0], func() {}, nil
	}
	mnt, err := os.MkdirTemp("", "helmr-image-")
	if err != nil {
		return "", nil, err
	}
	lowers := make([]string, 0, len(layers))
	for i := len(layers) - 1; i >= 0; i-- {
		lowers = append(lowers, escapeOverlayPath(layers[i]))
	}
	if err := unix.Mount("overlay", mnt, "overlay", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, "lowerdir="+strings.Join(lowers, ":")); err != nil {
		os.Remove(mnt)
		return "", nil, fmt.Errorf("merge the source image's layers: %w", err)
	}
	return mnt, func() {
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
		os.Remove(mnt)
	}, nil
}

// escapeOverlayPath escapes the characters overlayfs splits options on.
func escapeOverlayPath(p string) string {
	return strings.NewReplacer(`\`, `\\`, `:`, `\:`, `,`, `\,`).Replace(p)
}

// copyTree copies the contents of directory src into dst (created with
// src's metadata when top and missing).
func copyTree(src, dst string, top bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if rel == "." {
			if _, err := os.Lstat(target); err == nil {
				return nil // an existing destination keeps its own metadata
			}
		}
		return copyEntry(p, target, fi)
	})
}

// copyEntry copies one directory (itself only), file, symlink or device
// node with its mode, owner and modification time.
func copyEntry(src, dst string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("no stat data")
	}
	mode := fi.Mode()
	switch {
	case mode.IsDir():
		if err := os.Mkdir(dst, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	case mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
		return os.Lchown(dst, int(st.Uid), int(st.Gid))
	case mode.IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
	case mode&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe) != 0:
		if err := unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			return err
		}
	default:
		return nil // sockets are not copied
	}
	if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := os.Chmod(dst, mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	return os.Chtimes(dst, fi.ModTime(), fi.ModTime())
}

// CopyTree copies what the image holds under directory src into the
// existing directory dst (its contents; dst keeps its own metadata), with
// modes, owners, symlinks and times. It reports false, copying nothing,
// when the image has no such directory.
func (img Image) CopyTree(src, dst string) (bool, error) {
	p, ok := img.Lookup(src)
	if !ok {
		return false, nil
	}
	if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
		return false, fmt.Errorf("%s is not a directory in the image", src)
	}
	root, release, err := mergedView(img.Layers)
	if err != nil {
		return false, err
	}
	defer release()
	return true, copyTree(filepath.Join(root, filepath.FromSlash(path.Clean(src))), dst, true)
}
