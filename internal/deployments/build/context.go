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
	rules, err := loadIgnore(root)
	if err != nil {
		return fmt.Errorf("%w: ignore file: %v", ErrBuild, err)
	}
	var total int64
	var add func(img *deployments.ImageManifest) error
	add = func(img *deployments.ImageManifest) error {
		if img == nil {
			return nil
		}
		for i := range img.Steps {
			s := &img.Steps[i]
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
			exec, err := addTree(root, rel, s.Source.Type == "directory", rules, files, &total)
			if err != nil {
				return err
			}
			s.Source.Executables = exec
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

// addTree adds the files of the copy source rel (a directory's, minus what
// the ignore rules exclude) and returns those with an executable bit.
func addTree(root, rel string, dir bool, rules ignoreRules, files map[string][]byte, total *int64) ([]string, error) {
	base := filepath.Join(root, filepath.FromSlash(rel))
	var executables []string
	err := filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%w: copy source %s: %v", ErrBuild, rel, err)
		}
		r, _ := filepath.Rel(root, p)
		r = filepath.ToSlash(r)
		if dir && p != base && rules.ignored(r) {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
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
		files[deployments.ContextPath(r)] = data
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			executables = append(executables, r)
		}
		return nil
	})
	return executables, err
}
