package testenv

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackagesHaveDocComments fails when a Go package of the repository has
// no package doc comment.
func TestPackagesHaveDocComments(t *testing.T) {
	root := RepoRoot()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); name == "node_modules" || name == "testdata" || strings.HasPrefix(name, ".") && p != root {
			return filepath.SkipDir
		}
		pkgs, err := parser.ParseDir(token.NewFileSet(), p, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		for name, pkg := range pkgs {
			documented := false
			for _, f := range pkg.Files {
				if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
					documented = true
				}
			}
			if !documented {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("package %s (%s) has no doc comment", name, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
