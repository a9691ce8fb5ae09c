package sandbox

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// A checkpoint image (see Checkpointer) is a flat directory of regular
// files. Its last file, ImageDigestsFile, lists every other file with its
// size and SHA-256, one "digest size name" line each, sorted by name. A
// Checkpointer writes it (WriteImageDigests) once the image is complete
// and Restore checks the image against it (VerifyImage) before it boots
// anything from it, so an image that changed after Checkpoint (a flipped
// byte, a file added, removed or cut short) is refused rather than run.
// The digests catch damage and changes on the worker's disk; the worker
// seals the whole image (package checkpoints) before it leaves, which
// keeps others from rewriting image and digests together.

// ImageDigestsFile names the digests file of a checkpoint image.
const ImageDigestsFile = "helmr-image.sha256"

// ErrTamperedImage: a checkpoint image is not what Checkpoint wrote.
var ErrTamperedImage = errors.New("checkpoint image damaged or tampered")

// maxDigestsFile bounds the digests file Restore reads.
const maxDigestsFile = 1 << 20

type imageFile struct {
	name   string
	size   int64
	digest string
}

// WriteImageDigests records the size and digest of every file in dir, a
// complete checkpoint image, in dir/ImageDigestsFile.
func WriteImageDigests(dir string) error {
	files, err := digestImage(dir)
	if err != nil {
		return fmt.Errorf("checkpoint image digests: %w", err)
	}
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "%s %d %s\n", f.digest, f.size, f.name)
	}
	if err := os.WriteFile(filepath.Join(dir, ImageDigestsFile), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("checkpoint image digests: %w", err)
	}
	return nil
}

// VerifyImage checks dir against its digests file: the same files, each
// with the recorded size and digest. Errors wrap ErrTamperedImage, or are
// the reading errors they are.
func VerifyImage(dir string) error {
	want, err := readImageDigests(dir)
	if err != nil {
		return err
	}
	got, err := digestImage(dir)
	if err != nil {
		return fmt.Errorf("checkpoint image: %w", err)
	}
	if len(got) != len(want) {
		return fmt.Errorf("%w: %d files, %d recorded", ErrTamperedImage, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("%w: %s differs from its digest", ErrTamperedImage, got[i].name)
		}
	}
	return nil
}

// readImageDigests parses dir's digests file.
func readImageDigests(dir string) ([]imageFile, error) {
	f, err := os.Open(filepath.Join(dir, ImageDigestsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s", ErrTamperedImage, ImageDigestsFile)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint image: %w", err)
	}
	defer f.Close()
	var out []imageFile
	sc := bufio.NewScanner(io.LimitReader(f, maxDigestsFile))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			return nil, fmt.Errorf("%w: bad line in %s", ErrTamperedImage, ImageDigestsFile)
		}
		size, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: bad size in %s", ErrTamperedImage, ImageDigestsFile)
		}
		out = append(out, imageFile{name: fields[2], size: size, digest: fields[0]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrTamperedImage, ImageDigestsFile, err)
	}
	return out, nil
}

// digestImage hashes every file of dir but the digests file, in parallel,
// sorted by name. Anything but a regular file is an error wrapping
// ErrTamperedImage.
func digestImage(dir string) ([]imageFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []imageFile
	for _, e := range ents {
		if e.Name() == ImageDigestsFile {
			continue
		}
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("%w: %s is not a regular file", ErrTamperedImage, e.Name())
		}
		if strings.ContainsAny(e.Name(), " \t\r\n") {
			return nil, fmt.Errorf("checkpoint image file %q: a name with white space", e.Name())
		}
		files = append(files, imageFile{name: e.Name()})
	}
	errs := make([]error, len(files))
	var wg sync.WaitGroup
	for i := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			files[i].size, files[i].digest, errs[i] = fileSHA256(filepath.Join(dir, files[i].name))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(files, func(a, b imageFile) int { return strings.Compare(a.name, b.name) })
	return files, nil
}

func fileSHA256(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
