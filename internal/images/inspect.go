package images

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Lookup finds p (an absolute in-image path) in the layer stack as
// overlayfs would, top layer first, and returns its host path: a whiteout
// (a run step deleted it, or a parent) hides it, and an opaque directory
// hides what lower layers hold below it.
func (img Image) Lookup(p string) (string, bool) {
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	var parts []string
	if rel != "" {
		parts = strings.Split(rel, "/")
	}
	for i := len(img.Layers) - 1; i >= 0; i-- {
		opaque := false
		dir := img.Layers[i]
		for j, part := range parts {
			dir = filepath.Join(dir, part)
			fi, err := os.Lstat(dir)
			if err != nil {
				break // not in this layer: look lower, unless an opaque dir hides it
			}
			if isWhiteout(fi) {
				return "", false
			}
			if j == len(parts)-1 {
				return dir, true
			}
			if !fi.IsDir() {
				return "", false // a file where p needs a directory
			}
			opaque = opaque || isOpaque(dir)
		}
		if len(parts) == 0 {
			return img.Layers[i], true
		}
		if opaque {
			return "", false
		}
	}
	return "", false
}

// isWhiteout reports an overlayfs whiteout: a character device 0/0.
func isWhiteout(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode()&os.ModeCharDevice != 0 && st.Rdev == 0
}

// isOpaque reports an overlayfs opaque directory.
func isOpaque(dir string) bool {
	buf := make([]byte, 1)
	n, err := unix.Getxattr(dir, "trusted.overlay.opaque", buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// EnvValue returns the last value the image sets for key.
func (img Image) EnvValue(key string) string {
	v := ""
	for _, kv := range img.Env {
		if k, val, _ := strings.Cut(kv, "="); k == key {
			v = val
		}
	}
	return v
}

// FindNode reports where node is on the image's PATH, or an error saying it
// is missing.
func (img Image) FindNode() (string, error) {
	pathVar := img.EnvValue("PATH")
	if pathVar == "" {
		pathVar = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, dir := range strings.Split(pathVar, ":") {
		if !path.IsAbs(dir) {
			continue
		}
		if _, ok := img.Lookup(path.Join(dir, "node")); ok {
			return path.Join(dir, "node"), nil
		}
	}
	return "", fmt.Errorf("%w: the image does not provide node on PATH (%s); TypeScript tasks need Node.js %s or newer installed in the image", ErrPreparation, pathVar, MinNodeVersion)
}

// MinNodeVersion is the oldest Node.js the guest adapter supports.
const MinNodeVersion = "22.18"

// NodeVersionOK reports whether version ("22.23.3", "v24.1.0") is at least
// MinNodeVersion.
func NodeVersionOK(version string) bool {
	have := versionParts(strings.TrimPrefix(version, "v"))
	want := versionParts(MinNodeVersion)
	if have == nil {
		return false
	}
	for i := range want {
		var h int
		if i < len(have) {
			h = have[i]
		}
		if h != want[i] {
			return h > want[i]
		}
	}
	return true
}

func versionParts(v string) []int {
	v, _, _ = strings.Cut(v, "-") // a pre-release counts as its version
	var out []int
	for _, f := range strings.Split(v, ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil
		}
		out = append(out, n)
	}
	return out
}

// ResolveUser maps the image's user ("root", "name", "uid", "uid:gid") to
// numeric ids using the image's /etc/passwd, and returns the user's home.
func (img Image) ResolveUser() (uid, gid uint32, home string, err error) {
	u := img.User
	if u == "" {
		u = "root"
	}
	name, group, _ := strings.Cut(u, ":")
	entries := img.passwd()
	uid, gid, home, err = resolveName(name, entries)
	if err != nil {
		return 0, 0, "", err
	}
	if group != "" {
		g, ok := img.lookupGroup(group)
		if !ok {
			return 0, 0, "", fmt.Errorf("%w: user %q: no group %q in the image's /etc/group", ErrPreparation, u, group)
		}
		gid = g
	}
	return uid, gid, home, nil
}

// lookupGroup resolves a group name or number with the image's /etc/group.
func (img Image) lookupGroup(group string) (uint32, bool) {
	if g, err := strconv.ParseUint(group, 10, 32); err == nil {
		return uint32(g), true
	}
	p, ok := img.Lookup("/etc/group")
	if !ok {
		return 0, false
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 3 && f[0] == group {
			if g, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				return uint32(g), true
			}
		}
	}
	return 0, false
}

type passwdEntry struct {
	name     string
	uid, gid uint32
	home     string
}

func resolveName(name string, entries []passwdEntry) (uint32, uint32, string, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		for _, e := range entries {
			if e.uid == uint32(n) {
				return e.uid, e.gid, e.home, nil
			}
		}
		return uint32(n), uint32(n), "/", nil
	}
	for _, e := range entries {
		if e.name == name {
			return e.uid, e.gid, e.home, nil
		}
	}
	if name == "root" {
		return 0, 0, "/root", nil
	}
	return 0, 0, "", fmt.Errorf("%w: user %q is not in the image's /etc/passwd", ErrPreparation, name)
}

func (img Image) passwd() []passwdEntry {
	p, ok := img.Lookup("/etc/passwd")
	if !ok {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []passwdEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) < 7 {
			continue
		}
		uid, err1 := strconv.ParseUint(fs[2], 10, 32)
		gid, err2 := strconv.ParseUint(fs[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, passwdEntry{name: fs[0], uid: uint32(uid), gid: uint32(gid), home: fs[5]})
	}
	return out
}
