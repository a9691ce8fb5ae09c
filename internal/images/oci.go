package images

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/deployments"
)

// OCIPrefix names a base image kept on the worker as an OCI image layout:
// "oci:<name>" is <ImagesDir>/<name> (a layout directory) or
// <ImagesDir>/<name>.tar (a tar of one).
const OCIPrefix = "oci:"

// pulledBase is a base image from a registry or an OCI layout, unpacked
// once per image digest into LayersDir/base-<digest>/{rootfs,config.json}.
type pulledConfig struct {
	Env     []string `json:"env"`
	Workdir string   `json:"workdir"`
	User    string   `json:"user"`
	Digest  string   `json:"digest"`
	Ref     string   `json:"ref"`
}

// resolveBase returns the base image a from step names and the digest of
// its content: a built-in base, an OCI layout on the worker, or a registry
// image (pulled for this machine's platform, with the step's credentials
// if it declares them).
func (r *Resolver) resolveBase(ctx context.Context, from deployments.Step, opts PrepareOptions) (Image, string, error) {
	ref := from.Ref
	if strings.HasPrefix(ref, BasePrefix) {
		img, err := r.base(ref)
		if err != nil {
			return Image{}, "", err
		}
		d, err := r.BaseDigest(ref)
		if err != nil {
			return Image{}, "", fmt.Errorf("%w: %w", ErrPreparation, err)
		}
		if opts.BaseDigest != "" && d != opts.BaseDigest {
			return Image{}, "", fmt.Errorf("%w: base image %q here is %s, not %s, the one the image was built on at deploy", ErrPreparation, ref, d, opts.BaseDigest)
		}
		return img, d, nil
	}
	var (
		img v1.Image
		err error
	)
	if name, ok := strings.CutPrefix(ref, OCIPrefix); ok {
		img, err = r.layoutImage(name)
	} else {
		img, err = r.remoteImage(ctx, ref, from.Credentials, opts)
	}
	if err != nil {
		return Image{}, "", fmt.Errorf("%w: base image %q: %w", ErrPreparation, ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return Image{}, "", fmt.Errorf("%w: base image %q: %w", ErrPreparation, ref, err)
	}
	if opts.BaseDigest != "" && digest.String() != opts.BaseDigest {
		return Image{}, "", fmt.Errorf("%w: base image %q here is %s, not %s, the one the image was built on at deploy", ErrPreparation, ref, digest, opts.BaseDigest)
	}
	out, err := r.unpack(ref, digest.String(), img)
	if err != nil {
		return Image{}, "", fmt.Errorf("%w: base image %q: %w", ErrPreparation, ref, err)
	}
	return out, digest.String(), nil
}

// layoutImage opens the single image of an OCI layout in ImagesDir.
func (r *Resolver) layoutImage(n string) (v1.Image, error) {
	if n == "" || strings.ContainsAny(n, "/\\") || n == "." || n == ".." {
		return nil, fmt.Errorf("%q is not an image name in the worker's image directory", n)
	}
	if r.ImagesDir == "" {
		return nil, errors.New("this worker has no image directory for oci: bases")
	}
	dir := filepath.Join(r.ImagesDir, n)
	if _, err := os.Stat(dir); err != nil {
		tarball := dir + ".tar"
		if _, terr := os.Stat(tarball); terr != nil {
			return nil, fmt.Errorf("no OCI layout %s or %s on this worker", dir, tarball)
		}
		// A tar of a layout: unpacked once next to it, by its content.
		sum, err := fileSHA256(tarball)
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(r.LayersDir, "oci-"+sum)
		if _, err := os.Stat(dir); err != nil {
			if err := unpackLayoutTar(tarball, dir); err != nil {
				return nil, err
			}
		}
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("open OCI layout %s: %w", dir, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 {
		return nil, fmt.Errorf("OCI layout %s holds %d images, want 1", dir, len(m.Manifests))
	}
	return idx.Image(m.Manifests[0].Digest)
}

// remoteImage resolves a registry reference (a tag is looked up each
// build) for this machine's platform, anonymously or with the credentials
// in the vault secret creds. Registries on loopback are spoken to over
// plain HTTP.
func (r *Resolver) remoteImage(ctx context.Context, ref, creds string, opts PrepareOptions) (v1.Image, error) {
	parsed, err := name.ParseReference(ref, name.WithDefaultRegistry("index.docker.io"))
	if err != nil {
		return nil, fmt.Errorf("not a built-in base (%s...), an %s<name> layout, or a registry reference: %w", BasePrefix, OCIPrefix, err)
	}
	if opts.BaseDigest != "" {
		// Built at deploy: pull exactly what the build pulled.
		if parsed, err = name.NewDigest(parsed.Context().Name()+"@"+opts.BaseDigest, name.WithDefaultRegistry("index.docker.io")); err != nil {
			return nil, fmt.Errorf("pin %s to %s: %w", ref, opts.BaseDigest, err)
		}
	}
	auth, hidden := authn.Anonymous, []string(nil)
	if creds != "" {
		if auth, hidden, err = registryCredentials(ctx, creds, opts); err != nil {
			return nil, err
		}
	}
	img, err := remote.Image(parsed, remote.WithContext(ctx), remote.WithAuth(auth),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		err = pullError(err, parsed.Context().RegistryStr(), creds, hidden)
		return nil, fmt.Errorf("pull: %w (built-in bases on this worker: %s)", err, strings.Join(r.Bases(), ", "))
	}
	return img, nil
}

// unpack extracts img's flattened filesystem (whiteouts applied) and
// config once per digest, and returns it as a one-layer image.
func (r *Resolver) unpack(ref, digest string, img v1.Image) (Image, error) {
	dir := filepath.Join(r.LayersDir, "base-"+strings.TrimPrefix(digest, "sha256:"))
	if cfg, err := readPulledConfig(dir); err == nil {
		return pulledImage(dir, cfg), nil
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("image config: %w", err)
	}
	if err := os.MkdirAll(r.LayersDir, 0o755); err != nil {
		return Image{}, err
	}
	tmp, err := os.MkdirTemp(r.LayersDir, ".pull-")
	if err != nil {
		return Image{}, err
	}
	defer os.RemoveAll(tmp)
	rootfs := filepath.Join(tmp, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return Image{}, err
	}
	rc := mutate.Extract(img)
	err = extractTar(rc, rootfs)
	rc.Close()
	if err != nil {
		return Image{}, fmt.Errorf("unpack: %w", err)
	}
	cfg := pulledConfig{Env: cf.Config.Env, Workdir: cf.Config.WorkingDir, User: cf.Config.User, Digest: digest, Ref: ref}
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "config.json"), data, 0o644); err != nil {
		return Image{}, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, err2 := readPulledConfig(dir); err2 != nil {
			return Image{}, err
		}
	}
	return pulledImage(dir, cfg), nil
}

func readPulledConfig(dir string) (pulledConfig, error) {
	var cfg pulledConfig
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return cfg, err
	}
	return cfg, json.Unmarshal(data, &cfg)
}

func pulledImage(dir string, cfg pulledConfig) Image {
	return Image{Layers: []string{filepath.Join(dir, "rootfs")}, Env: cfg.Env, Workdir: cfg.Workdir, User: cfg.User}
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// unpackLayoutTar extracts a tar of an OCI layout into dir.
func unpackLayoutTar(tarball, dir string) error {
	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	defer f.Close()
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := extractTar(f, tmp); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("unpack %s: %w", tarball, err)
	}
	return os.Rename(tmp, dir)
}

// extractTar writes a tar stream's entries under dst with their modes,
// owners and times. Entry names and hard link targets are confined to dst
// (".." cannot climb out), and no entry is written through a symlink the
// stream created, so a hostile image cannot write outside its root.
func extractTar(r io.Reader, dst string) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if rel == "" {
			continue
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		if err := noSymlinkParents(dst, rel); err != nil {
			return err
		}
		mode := os.FileMode(hdr.Mode).Perm()
		if hdr.Mode&0o4000 != 0 {
			mode |= os.ModeSetuid
		}
		if hdr.Mode&0o2000 != 0 {
			mode |= os.ModeSetgid
		}
		if hdr.Mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		// Parents may come later in the stream (a flattened image lists
		// its top layer first), or not at all.
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeDir {
			// A later entry replaces an earlier one of the same name.
			if fi, err := os.Lstat(target); err == nil && !fi.IsDir() {
				os.Remove(target)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
			if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
			continue
		case tar.TypeLink:
			src := strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
			if err := noSymlinkParents(dst, src); err != nil {
				return err
			}
			if err := os.Link(filepath.Join(dst, filepath.FromSlash(src)), target); err != nil {
				return err
			}
			continue
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[hdr.Typeflag]
			if err := unix.Mknod(target, kind|uint32(hdr.Mode&0o7777), int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
				return err
			}
		default:
			continue // xattr-only and other entries
		}
		if err := os.Lchown(target, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		if err := os.Chmod(target, mode); err != nil {
			return err
		}
		if err := os.Chtimes(target, hdr.ModTime, hdr.ModTime); err != nil {
			return err
		}
	}
}

// noSymlinkParents fails if a directory on the way to rel under dst is a
// symlink.
func noSymlinkParents(dst, rel string) error {
	cur := dst
	parts := strings.Split(rel, "/")
	for _, p := range parts[:len(parts)-1] {
		cur = filepath.Join(cur, p)
		fi, err := os.Lstat(cur)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("entry %s goes through the symlink %s", rel, strings.TrimPrefix(cur, dst))
		}
	}
	return nil
}
