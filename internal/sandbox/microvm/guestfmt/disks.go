package guestfmt

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Image sizing: the tree's bytes (in 4 KiB blocks) and an inode per entry,
// plus room for ext4's own metadata.
const (
	blockSize   = 4096
	imageSlack  = 16 << 20
	inodeSlack  = 1024
	bytesPerEnt = 256 // an inode
)

// DirImage writes an ext4 image of the tree at src to dst (which must not
// exist) with mkfs.ext4 -d: no loop device and no mount. The image holds
// the tree's files with their owners, modes, extended attributes and
// special files (an overlayfs layer's whiteouts among them) and at least
// minSize bytes. owner, if set, owns the image's root directory.
func DirImage(dst, src string, minSize int64, owner *[2]int) error {
	return dirImage(dst, src, minSize, owner, false)
}

// Reproducible images: a fixed file system UUID and directory hash seed,
// mkfs.ext4's clock fixed, no metadata checksums (they are seeded by the
// UUID and would break under normalizeTimes) and every inode's times
// normalized: the same tree, unpacked on any host, makes the same bytes.
const (
	reproducibleUUID = "6c6d6c72-0000-4000-8000-68656c6d7221"
	reproducibleTime = "1"
)

// dirImage is DirImage, reproducible if asked (see reproducibleUUID).
func dirImage(dst, src string, minSize int64, owner *[2]int, reproducible bool) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("disk image of %s: %w", src, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("disk image of %s: %w", src, errNotDir)
	}
	size, inodes, err := treeSize(src)
	if err != nil {
		return fmt.Errorf("disk image of %s: %w", src, err)
	}
	size = size + size/10 + imageSlack
	size = max(size, minSize)
	size = (size + blockSize - 1) / blockSize * blockSize
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("disk image: %w", err)
	}
	// No journal: read-only disks need none, and the workspace copy is
	// short-lived (see the microvm package). Lazy inode tables keep the
	// image sparse.
	ext := "lazy_itable_init=1,nodiscard"
	if owner != nil {
		ext += ",root_owner=" + strconv.Itoa(owner[0]) + ":" + strconv.Itoa(owner[1])
	}
	features := "^has_journal"
	var env []string
	if reproducible {
		features += ",^metadata_csum"
		ext += ",hash_seed=" + reproducibleUUID
		env = append(os.Environ(), "E2FSPROGS_FAKE_TIME="+reproducibleTime)
	}
	args := []string{"-q", "-F", "-m", "0", "-b", strconv.Itoa(blockSize), "-O", features,
		"-N", strconv.FormatInt(inodes+inodeSlack, 10), "-E", ext}
	if reproducible {
		args = append(args, "-U", reproducibleUUID)
	}
	args = append(args, "-d", src, dst)
	mkfs := exec.Command("mkfs.ext4", args...)
	mkfs.Env = env
	if out, err := mkfs.CombinedOutput(); err != nil {
		os.Remove(dst)
		return fmt.Errorf("disk image of %s: mkfs.ext4: %v: %s", src, err, out)
	}
	if owner != nil {
		// mkfs.ext4 -d gives the root the source directory's owner.
		if out, err := exec.Command("debugfs", "-w", "-R",
			fmt.Sprintf("set_inode_field / uid %d", owner[0]), dst).CombinedOutput(); err != nil {
			os.Remove(dst)
			return fmt.Errorf("disk image of %s: debugfs: %v: %s", src, err, out)
		}
		if out, err := exec.Command("debugfs", "-w", "-R",
			fmt.Sprintf("set_inode_field / gid %d", owner[1]), dst).CombinedOutput(); err != nil {
			os.Remove(dst)
			return fmt.Errorf("disk image of %s: debugfs: %v: %s", src, err, out)
		}
	}
	if reproducible {
		if err := normalizeTimes(dst); err != nil {
			os.Remove(dst)
			return fmt.Errorf("disk image of %s: %w", src, err)
		}
	}
	return nil
}

// treeSize is the space src's tree takes in blocks and its entry count.
func treeSize(src string) (bytes, entries int64, err error) {
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		entries++
		bytes += bytesPerEnt
		if d.Type().IsRegular() || d.IsDir() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			bytes += (fi.Size() + blockSize - 1) / blockSize * blockSize
		}
		return nil
	})
	return bytes, entries, err
}

// LayerImage returns the read-only disk image of the root layer at dir,
// making it in cacheDir first unless a previous call did. The cache key is
// the layer's path and its directory's identity (device, inode, change
// time): layers are immutable once made (package images builds a layer
// under a new path, never in place), so a layer replaced under the same
// path gets a new key. The image is reproducible: the same layer makes
// the same bytes on every host (LayerDigest), which a guest restored from
// a checkpoint taken elsewhere needs, its kernel holding what it read of
// the disks.
func LayerImage(cacheDir, dir string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", fmt.Errorf("layer %s: %w", dir, err)
	}
	h := sha256.New()
	// "r1": the reproducible format (dirImage); older images are not.
	fmt.Fprintf(h, "r1\x00%s\x00%d %d %d.%d", dir, st.Dev, st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
	img := filepath.Join(cacheDir, "layer-"+hex.EncodeToString(h.Sum(nil))[:32]+".ext4")
	if _, err := os.Stat(img); err == nil {
		return img, nil
	}
	f, err := os.CreateTemp(cacheDir, ".layer-*.tmp")
	if err != nil {
		return "", fmt.Errorf("layer %s: %w", dir, err)
	}
	tmp := f.Name()
	f.Close()
	os.Remove(tmp) // dirImage creates it afresh (O_EXCL)
	if err := dirImage(tmp, dir, 0, nil, true); err != nil {
		return "", err
	}
	digest, err := fileDigest(tmp)
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("layer %s: %w", dir, err)
	}
	if err := os.WriteFile(img+digestSuffix, []byte(digest+"\n"), 0o600); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("layer %s: %w", dir, err)
	}
	if err := os.Rename(tmp, img); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("layer %s: %w", dir, err)
	}
	return img, nil
}

// digestSuffix names the file beside a layer image that holds its digest.
const digestSuffix = ".sha256"

// LayerDigest is the digest ("sha256:…") of the layer image at img (a LayerImage
// result), recorded when it was made.
func LayerDigest(img string) (string, error) {
	b, err := os.ReadFile(img + digestSuffix)
	if err == nil {
		if d := strings.TrimSpace(string(b)); strings.HasPrefix(d, "sha256:") {
			return d, nil
		}
	}
	d, err := fileDigest(img)
	if err != nil {
		return "", fmt.Errorf("layer image %s: %w", img, err)
	}
	return d, nil
}
