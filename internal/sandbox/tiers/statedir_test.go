package tiers

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/testenv"
)

// mode is the permission bits of p.
func mode(t *testing.T, p string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// TestStateDirFresh: on a host where nothing made the state root, each
// level is created with the mode its tier needs, whichever tier comes
// first, and a tier coming second finds what it needs.
func TestStateDirFresh(t *testing.T) {
	for _, order := range [][]string{{"private", "searchable"}, {"searchable", "private"}} {
		t.Run(strings.Join(order, "-then-"), func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "missing", "run")
			want := map[string]fs.FileMode{root: 0o711, filepath.Dir(root): 0o711}
			for _, kind := range order {
				searchable := kind == "searchable"
				dir, err := stateDir(Host{}, root, []string{kind, "w-1"}, searchable)
				if err != nil {
					t.Fatalf("stateDir(%s) = %v", kind, err)
				}
				if dir != filepath.Join(root, kind, "w-1") {
					t.Errorf("stateDir(%s) = %s", kind, dir)
				}
				m := fs.FileMode(0o700)
				if searchable {
					m = 0o711
				}
				want[filepath.Join(root, kind)], want[dir] = m, m
			}
			for p, m := range want {
				if got := mode(t, p); got != m {
					t.Errorf("mode of %s = %04o, want %04o", p, got, m)
				}
			}
		})
	}
}

// TestStateDirExisting: what another program (or an older Helmr) made is
// checked; a searchable tier adds o+x where it is missing and changes
// nothing else; what it cannot use safely is refused.
func TestStateDirExisting(t *testing.T) {
	for _, c := range []struct {
		name       string
		rootMode   fs.FileMode
		searchable bool
		wantMode   fs.FileMode // the root's afterwards
		wantErr    string
	}{
		{"0700 root, searchable tier", 0o700, true, 0o701, ""},
		{"0700 root, private tier", 0o700, false, 0o700, ""},
		{"0750 root, searchable tier", 0o750, true, 0o751, ""},
		{"0755 root left as it is", 0o755, true, 0o755, ""},
		{"sticky 1700 root keeps its sticky bit", fs.ModeSticky | 0o700, true, fs.ModeSticky | 0o701, ""},
		{"world-writable root", 0o777, true, 0o777, "writable by others"},
		{"group-writable root", 0o770, false, 0o770, "writable by others"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "run")
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(root, c.rootMode); err != nil {
				t.Fatal(err)
			}
			_, err := stateDir(Host{}, root, []string{"tier", "w-1"}, c.searchable)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("stateDir() = %v, want error %q", err, c.wantErr)
			}
			fi, err := os.Stat(root)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode() &^ fs.ModeDir; got != c.wantMode {
				t.Errorf("root mode after stateDir = %v, want %v", got, c.wantMode)
			}
		})
	}
}

func TestStateDirRefuses(t *testing.T) {
	t.Run("relative root", func(t *testing.T) {
		if _, err := stateDir(Host{}, "run/helmr", []string{"x"}, true); err == nil {
			t.Error("stateDir(relative root) = nil error")
		}
	})
	t.Run("symlink below the root", func(t *testing.T) {
		root := t.TempDir()
		if err := os.Symlink(t.TempDir(), filepath.Join(root, "tier")); err != nil {
			t.Fatal(err)
		}
		if _, err := stateDir(Host{}, root, []string{"tier", "w-1"}, false); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("stateDir(symlinked tier dir) = %v, want refused", err)
		}
	})
	t.Run("symlinked root", func(t *testing.T) {
		target := t.TempDir()
		root := filepath.Join(t.TempDir(), "run")
		if err := os.Symlink(target, root); err != nil {
			t.Fatal(err)
		}
		if dir, err := stateDir(Host{}, root, []string{"tier"}, false); err != nil || mode(t, filepath.Join(target, "tier")) != 0o700 {
			t.Errorf("stateDir(symlinked root) = %s, %v; want the tier's dir in the link's target", dir, err)
		}
	})
	t.Run("file", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "run")
		if err := os.WriteFile(root, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := stateDir(Host{}, root, nil, false); err == nil || !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("stateDir(file) = %v, want refused", err)
		}
	})
	t.Run("bad instance", func(t *testing.T) {
		for _, sub := range []string{"..", "a/b", ""} {
			if _, err := stateDir(Host{}, t.TempDir(), []string{sub}, false); err == nil {
				t.Errorf("stateDir(sub %q) = nil error", sub)
			}
		}
	})
	t.Run("another owner", func(t *testing.T) {
		testenv.RequireRoot(t)
		root := filepath.Join(t.TempDir(), "run")
		if err := os.Mkdir(root, 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(root, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := stateDir(Host{}, root, []string{"tier"}, true); err == nil || !strings.Contains(err.Error(), "not owned") {
			t.Errorf("stateDir(root owned by nobody) = %v, want refused", err)
		}
	})
}
