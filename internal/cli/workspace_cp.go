package cli

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// cpHelp is helmr workspace cp's long help: its conventions.
const cpHelp = `Copy a file or a directory between this machine and a workspace.

One side is WS:PATH (PATH relative to the workspace; "ws_…:" alone is the
workspace itself), the other a local path or - (standard input or output).
Directories need no -r: a directory is detected and copied whole, as a tar
streamed under the hood, both ways, following cp -r:

  - SRC a directory, DST an existing directory: SRC is copied into it
    (DST/NAME); SRC ending in /. copies SRC's contents into DST instead.
  - SRC a directory, DST missing: DST is made and gets SRC's contents.
  - SRC a file, DST an existing directory: the file goes into it (DST/NAME).
  - SRC a workspace directory, DST -: the tar itself goes to standard output.
  - SRC -: standard input is the contents of the file WS:PATH.

Symlinks are copied as symlinks; one that leads out of the directory is
refused when uploading, and never followed when unpacking here. A local
directory is written with this user's ownership.`

// workspaceCopy copies a file or a directory between this machine (a
// path, or - for standard input or output) and a workspace (WS:PATH).
func (a *App) workspaceCopy(ctx context.Context, src, dst string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	sws, sp, sremote := remotePath(src)
	dws, dp, dremote := remotePath(dst)
	switch {
	case sremote && !dremote:
		return a.copyFromWorkspace(ctx, c, sws, sp, dst)
	case dremote && !sremote:
		return a.copyToWorkspace(ctx, c, src, dws, dp)
	}
	return errors.New("helmr workspace cp: one side is WS:PATH (ws_...:path/in/workspace), the other a local path or -")
}

// remotePath splits WS:PATH; "" is the workspace itself.
func remotePath(s string) (ws, p string, ok bool) {
	ws, p, ok = strings.Cut(s, ":")
	return ws, p, ok && strings.HasPrefix(ws, workspaces.Prefix)
}

// remoteDir reports whether p is a directory in workspace ws.
func remoteDir(ctx context.Context, c *client.Client, ws, p string) (bool, error) {
	_, err := c.ListDir(ctx, ws, p)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errdefs.ErrNotFound):
		return false, nil
	}
	return false, err
}

// intoName is the name SRC takes inside an existing directory: its last
// element, or "" for SRC/. (its contents go into the directory itself).
func intoName(src string) string {
	if src == "" || src == "." || strings.HasSuffix(src, "/.") {
		return ""
	}
	return path.Base(filepath.ToSlash(src))
}

func (a *App) copyFromWorkspace(ctx context.Context, c *client.Client, ws, p, dst string) error {
	isDir, err := remoteDir(ctx, c, ws, p)
	if err != nil {
		return err
	}
	if !isDir {
		if dst == "-" {
			_, err := c.ReadFileTo(ctx, ws, p, a.Stdout)
			return err
		}
		if st, err := os.Stat(dst); err == nil && st.IsDir() {
			dst = filepath.Join(dst, path.Base(p))
		}
		return writeLocal(dst, func(w io.Writer) error { _, err := c.ReadFileTo(ctx, ws, p, w); return err })
	}
	if dst == "-" {
		_, err := c.DownloadTarTo(ctx, ws, p, a.Stdout)
		return err
	}
	if st, err := os.Stat(dst); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("helmr workspace cp: %s:%s is a directory and %s is not", ws, p, dst)
		}
		if name := intoName(p); name != "" {
			dst = filepath.Join(dst, name)
		}
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := untar(pr, dst)
		if err == nil {
			_, err = io.Copy(io.Discard, pr) // the archive's padding
		}
		pr.CloseWithError(errors.Join(err, errors.New("unpacking stopped")))
		done <- err
	}()
	_, err = c.DownloadTarTo(ctx, ws, p, pw)
	pw.CloseWithError(err)
	if uerr := <-done; uerr != nil {
		return fmt.Errorf("helmr workspace cp: unpack into %s: %w", dst, uerr)
	}
	return err
}

// writeLocal writes the file dst with what fill writes, removing it if
// fill fails.
func writeLocal(dst string, fill func(w io.Writer) error) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	if err := fill(f); err != nil {
		f.Close()
		os.Remove(dst)
		return err
	}
	return f.Close()
}

func (a *App) copyToWorkspace(ctx context.Context, c *client.Client, src, ws, p string) error {
	var st os.FileInfo
	if src != "-" {
		var err error
		if st, err = os.Stat(src); err != nil {
			return fmt.Errorf("helmr workspace cp: %w", err)
		}
	}
	destDir, err := remoteDir(ctx, c, ws, p)
	if err != nil {
		return err
	}
	if st == nil || !st.IsDir() {
		target := p
		if destDir {
			if src == "-" {
				return fmt.Errorf("helmr workspace cp: %s:%s is a directory: name the file to write", ws, p)
			}
			target = path.Join(orDot(p), filepath.Base(src))
		}
		if src == "-" {
			return c.WriteFileFrom(ctx, ws, target, a.Stdin)
		}
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		return c.WriteFileFrom(ctx, ws, target, f)
	}
	target := p
	if name := intoName(filepath.ToSlash(src)); destDir && name != "" {
		target = path.Join(orDot(p), name)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarDir(src, pw)) }()
	err = c.UploadTarFrom(ctx, ws, target, pr)
	pr.CloseWithError(errors.New("the upload ended"))
	return err
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// tarDir writes a tar of the directory dir's contents to w: directories,
// regular files and symlinks (as links); anything else is an error.
func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return fmt.Errorf("%s is neither a file, a directory nor a symlink", p)
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			h.Name += "/"
		}
		h.Uname, h.Gname, h.Uid, h.Gid = "", "", 0, 0
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
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// untar unpacks the tar r into dir (made if missing), through an os.Root:
// no member lands outside dir, and no symlink, in the tar or there
// already, is followed out of it.
func untar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("member %q leaves the directory", h.Name)
		}
		name = filepath.FromSlash(name)
		if parent := filepath.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return err
			}
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, mode|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = root.Remove(name)
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
		case tar.TypeLink:
			_ = root.Remove(name)
			if err := root.Link(filepath.FromSlash(path.Clean(h.Linkname)), name); err != nil {
				return err
			}
		default:
			return fmt.Errorf("member %q is a %c entry: only files, directories and links are unpacked", h.Name, h.Typeflag)
		}
	}
}
