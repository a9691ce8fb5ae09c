package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// image writes a small checkpoint image with its digests into a new
// directory.
func image(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{"checkpoint.img": "kernel state", "pages.img": "memory pages", "empty": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteImageDigests(dir); err != nil {
		t.Fatalf("WriteImageDigests() = %v", err)
	}
	return dir
}

func TestVerifyImage(t *testing.T) {
	if err := VerifyImage(image(t)); err != nil {
		t.Fatalf("VerifyImage(untouched) = %v", err)
	}
	for name, tamper := range map[string]func(t *testing.T, dir string) error{
		"flipped byte": func(t *testing.T, dir string) error {
			f, err := os.OpenFile(filepath.Join(dir, "pages.img"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("M"), 0)
			return err
		},
		"cut short": func(t *testing.T, dir string) error { return os.Truncate(filepath.Join(dir, "checkpoint.img"), 3) },
		"grown":     func(t *testing.T, dir string) error { return os.Truncate(filepath.Join(dir, "empty"), 1) },
		"removed":   func(t *testing.T, dir string) error { return os.Remove(filepath.Join(dir, "pages.img")) },
		"added": func(t *testing.T, dir string) error {
			return os.WriteFile(filepath.Join(dir, "extra.img"), nil, 0o600)
		},
		"renamed": func(t *testing.T, dir string) error {
			return os.Rename(filepath.Join(dir, "pages.img"), filepath.Join(dir, "pages2.img"))
		},
		"no digests": func(t *testing.T, dir string) error { return os.Remove(filepath.Join(dir, ImageDigestsFile)) },
		"bad digests": func(t *testing.T, dir string) error {
			return os.WriteFile(filepath.Join(dir, ImageDigestsFile), []byte("nonsense\n"), 0o600)
		},
		"symlink": func(t *testing.T, dir string) error {
			return os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
		},
		"directory": func(t *testing.T, dir string) error { return os.Mkdir(filepath.Join(dir, "sub"), 0o700) },
	} {
		t.Run(name, func(t *testing.T) {
			dir := image(t)
			if err := tamper(t, dir); err != nil {
				t.Fatal(err)
			}
			if err := VerifyImage(dir); !errors.Is(err, ErrTamperedImage) {
				t.Errorf("VerifyImage(%s) = %v, want ErrTamperedImage", name, err)
			}
		})
	}
}
