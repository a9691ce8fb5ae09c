package images

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ExportOCI writes img as an OCI image layout at dir (which must not
// exist): one OCI layer per layer of the stack, overlayfs whiteouts and
// opaque directories turned into OCI whiteout files, and a config with the
// image's env, workdir and user. Any OCI tool, and a Helmr worker as an
// "oci:" base, can read it.
func ExportOCI(img Image, dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("export: %s already exists", dir)
	}
	out := empty.Image
	for _, l := range img.Layers {
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return layerTar(l), nil },
			tarball.WithCompressionLevel(gzip.BestSpeed))
		if err != nil {
			return fmt.Errorf("export layer %s: %w", l, err)
		}
		if out, err = mutate.AppendLayers(out, layer); err != nil {
			return fmt.Errorf("export layer %s: %w", l, err)
		}
	}
	cf, err := out.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Env, cf.Config.WorkingDir, cf.Config.User = img.Env, img.Workdir, img.User
	if out, err = mutate.ConfigFile(out, cf); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := p.AppendImage(out, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}

// layerTar streams a layer directory as a tar, whiteouts translated.
func layerTar(dir string) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeLayerTar(dir, pw)) }()
	return pr
}

func writeLayerTar(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if isWhiteout(fi) {
			base := filepath.ToSlash(filepath.Dir(rel))
			name := ".wh." + filepath.Base(rel)
			if base != "." {
				name = base + "/" + name
			}
			return tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, ModTime: fi.ModTime()})
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		st := fi.Sys().(*syscall.Stat_t)
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = int(st.Uid), int(st.Gid), "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
		}
		if fi.IsDir() && isOpaque(p) {
			return tw.WriteHeader(&tar.Header{Name: rel + "/.wh..wh..opq", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: fi.ModTime()})
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// WriteExt4 writes img's merged root filesystem as an ext4 image file
// (for a VM tier's root disk), sized to its content plus headroom.
func WriteExt4(img Image, file string) error {
	if _, err := os.Stat(file); err == nil {
		return fmt.Errorf("ext4 export: %s already exists", file)
	}
	root, release, err := mergedView(img.Layers)
	if err != nil {
		return err
	}
	defer release()
	var size int64
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fi, err := d.Info(); err == nil {
			size += (fi.Size()+4095)/4096*4096 + 256 // blocks plus an inode's share
		}
		return nil
	})
	if err != nil {
		return err
	}
	size = size*5/4 + 64<<20
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return err
	}
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-E", "root_owner=0:0", "-d", root, file, strconv.FormatInt(size/1024, 10)+"k").CombinedOutput()
	if err != nil {
		os.Remove(file)
		return fmt.Errorf("mkfs.ext4 -d: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
