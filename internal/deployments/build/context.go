package build

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/helmr/helmr/internal/deployments"
)

// addContext adds the project files that copy steps reference to files,
// under deployments.ContextPath. Symlinks that leave the project are refused.
func addContext(root string, m deployments.Manifest, files map[string][]byte) error {
	var total int64
	var add func(img *deployments.ImageManifest) error
	add = func(img *deployments.ImageManifest) error {
		if img == nil {
			return nil
		}
		for _, s := range img.Steps {
			if s.Kind == deployments.StepCopyFrom {
				if err := add(s.Image); err != nil {
					return err
				}
			}
			if s.Kind != deployments.StepCopy || s.Source == nil {
				continue
			}
			rel := path.Clean(s.Source.Path)
			if !filepath.IsLocal(rel) && rel != "." {
				return fmt.Errorf("%w: copy source %q escapes the project", ErrBuild, s.Source.Path)
			}
			if err := addTree(root, rel, files, &total); err != nil {
				return err
			}
		}
		return nil
	}
	for _, t := range m.Tasks {
		if t.Sandbox != nil {
			if err := add(t.Sandbox.Image); err != nil {
				return err
			}
		}
	}
	return nil
}

func addTree(root, rel string, files map[string][]byte, total *int64) error {
	base := filepath.Join(root, filepath.FromSlash(rel))
	return filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%w: copy source %s: %v", ErrBuild, rel, err)
		}
		if e.IsDir() {
			if e.Name() == "node_modules" && p != base || e.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		if e.Type()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(p)
			if err != nil {
				return fmt.Errorf("%w: copy source %s: %v", ErrBuild, p, err)
			}
			if r, err := filepath.Rel(root, target); err != nil || !filepath.IsLocal(r) {
				return fmt.Errorf("%w: copy source %s links outside the project", ErrBuild, p)
			}
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("%w: copy source: %v", ErrBuild, err)
		}
		*total += int64(len(data))
		if *total > MaxContextBytes {
			return fmt.Errorf("%w: copied project files exceed %d bytes", ErrBuild, MaxContextBytes)
		}
		r, _ := filepath.Rel(root, p)
		files[deployments.ContextPath(filepath.ToSlash(r))] = data
		return nil
	})
}
