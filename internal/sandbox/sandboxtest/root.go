package sandboxtest

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/helmr/helmr/internal/sandbox"
)

// rootWrites are what a harness writes outside its workspace, as the
// image's root; rootProbe writes them and rootCheck prints what a sandbox
// holds of them.
const (
	rootProbe = `set -e
mkdir /myrepo && echo repo > /myrepo/README
echo '{"step":1}' > /root/state.json
printf '#!/bin/sh\necho probe ran\n' > /usr/local/bin/helmr-probe && chmod 755 /usr/local/bin/helmr-probe
helmr-probe
mkdir -p /etc/helmr-probe.d && echo conf > /etc/helmr-probe.d/x.conf
echo changed >> /probe/changed
rm /probe/doomed
rm -r /probe/dir && mkdir /probe/dir && test -z "$(ls -A /probe/dir)"
mv /probe/movedir /probe/moved && test -e /probe/moved/x
echo ok`
	rootCheck = `for p in /myrepo/README /root/state.json /usr/local/bin/helmr-probe /etc/helmr-probe.d/x.conf /probe/doomed /probe/dir/old /probe/movedir/x; do
  if [ -e $p ]; then echo "$p:present"; else echo "$p:absent"; fi
done
cat /probe/changed`
)

// probeLayer is a layer the root tests stack on top: a file the sandbox
// changes (a copy-up), one it removes (a whiteout), a directory it
// removes and makes again (an opaque directory) and one it renames.
func probeLayer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "probe"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "probe", "changed"), "original\n")
	writeFile(t, filepath.Join(dir, "probe", "doomed"), "doomed\n")
	for _, d := range []string{"dir", "movedir"} {
		if err := os.Mkdir(filepath.Join(dir, "probe", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "probe", "dir", "old"), "old\n")
	writeFile(t, filepath.Join(dir, "probe", "movedir", "x"), "x\n")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// testWritableRoot: a sandbox's root is writable as a container's (as the
// image's root: a new top-level directory, /root, /usr/local/bin, /etc,
// changing, removing and renaming the image's files and directories),
// while Helmr's own paths stay
// read-only; the writes are bounded (ENOSPC past Spec.RootSizeBytes) and
// gone with the sandbox: a new sandbox of the same layers sees none of
// them, and no layer directory on the host changed.
func testWritableRoot(t *testing.T, newRuntime func(t *testing.T) sandbox.Runtime, rootfs string) {
	layer := probeLayer(t)
	before := map[string]string{"probe layer": treeDigest(t, layer)}
	baseDirs := []string{".", "root", "etc", "usr/local/bin"}
	for _, d := range baseDirs {
		before["base "+d] = statDigest(t, filepath.Join(rootfs, d))
	}
	asRoot := func(s *sandbox.Spec) {
		s.UID, s.GID = 0, 0
		s.RootLayers = append(s.RootLayers, layer)
	}
	rt := newRuntime(t)
	f := start(t, rt, rootfs, asRoot)
	before["top layer"] = treeDigest(t, f.TopLayer)

	t.Run("Writable", func(t *testing.T) {
		if got := f.OK(t, "sh", "-c", rootProbe); got != "probe ran\nok\n" {
			t.Fatalf("root writes printed %q, want the probe's output and ok", got)
		}
		want := "/myrepo/README:present\n/root/state.json:present\n/usr/local/bin/helmr-probe:present\n" +
			"/etc/helmr-probe.d/x.conf:present\n/probe/doomed:absent\n/probe/dir/old:absent\n/probe/movedir/x:absent\noriginal\nchanged\n"
		if got := f.OK(t, "sh", "-c", rootCheck); got != want {
			t.Errorf("after the writes the sandbox holds:\n%s\nwant:\n%s", got, want)
		}
		if got := f.OK(t, "cat", "/root/state.json"); got != "{\"step\":1}\n" {
			t.Errorf("/root/state.json = %q", got)
		}
	})
	t.Run("HelmrPathsReadOnly", func(t *testing.T) { testHelmrPathsReadOnly(t, f) })
	t.Run("SizeBound", func(t *testing.T) { testRootSizeBound(t, newRuntime(t), rootfs) })
	t.Run("NoHelmrHost", func(t *testing.T) {
		g := start(t, newRuntime(t), rootfs, func(s *sandbox.Spec) { s.UID, s.GID, s.HelmrHost = 0, 0, "" })
		if r := g.Exec(t, "sh", "-c", "echo x > /opt/helmr/x"); r.Err != nil || r.Status.Code == 0 {
			t.Errorf("writing /opt/helmr/x without a HelmrHost = %+v, %v; want it refused", r.Status, r.Err)
		}
		g.OK(t, "sh", "-c", "mkdir /opt/other && echo y > /opt/other/y")
	})
	t.Run("Discarded", func(t *testing.T) {
		if err := f.SB.Destroy(t.Context()); err != nil {
			t.Fatalf("Destroy() = %v", err)
		}
		g := start(t, newRuntime(t), rootfs, func(s *sandbox.Spec) {
			asRoot(s)
			s.RootLayers[len(s.RootLayers)-2] = f.TopLayer
		})
		want := "/myrepo/README:absent\n/root/state.json:absent\n/usr/local/bin/helmr-probe:absent\n" +
			"/etc/helmr-probe.d/x.conf:absent\n/probe/doomed:present\n/probe/dir/old:present\n/probe/movedir/x:present\noriginal\n"
		if got := g.OK(t, "sh", "-c", rootCheck); got != want {
			t.Errorf("a new sandbox of the same layers holds:\n%s\nwant the image as it was:\n%s", got, want)
		}
		after := map[string]string{"probe layer": treeDigest(t, layer), "top layer": treeDigest(t, f.TopLayer)}
		for _, d := range baseDirs {
			after["base "+d] = statDigest(t, filepath.Join(rootfs, d))
		}
		for k, v := range before {
			if after[k] != v {
				t.Errorf("%s changed on the host: %s, was %s", k, after[k], v)
			}
		}
		for _, p := range []string{"myrepo", "root/state.json", "usr/local/bin/helmr-probe", "etc/helmr-probe.d"} {
			if _, err := os.Lstat(filepath.Join(rootfs, p)); err == nil {
				t.Errorf("%s reached the base layer on the host", p)
			}
		}
	})
}

// testHelmrPathsReadOnly: in a writable root, the runtime's own paths
// refuse even the image's root: /opt/helmr and the identity files can be
// neither written, replaced nor removed, and keep their content.
func testHelmrPathsReadOnly(t *testing.T, f *fixture) {
	for _, script := range []string{
		"echo x > /opt/helmr/x",
		"echo x > /opt/helmr/hello.js",
		"rm -f /opt/helmr/hello.js",
		"echo 10.0.0.1 evil > /etc/hosts",
		"echo x >> /etc/hostname",
		"echo nameserver 10.0.0.1 > /etc/resolv.conf",
		"rm /etc/resolv.conf",
		"mv /etc/hosts /etc/hosts.old",
		"echo x > /etc/hosts.tmp && mv /etc/hosts.tmp /etc/hosts",
	} {
		if r := f.Exec(t, "sh", "-c", script); r.Err != nil || r.Status.Code == 0 {
			t.Errorf("Exec(%q) as root = %+v, %v; want it refused", script, r.Status, r.Err)
		}
	}
	checkIdentity(t, f)
	if got := f.OK(t, "cat", "/opt/helmr/hello.js"); got != helloJS {
		t.Errorf("/opt/helmr/hello.js = %q after the attempts, want %q", got, helloJS)
	}
}

// rootSize is the bound testRootSizeBound sets.
const rootSize = 32 << 20

// testRootSizeBound: writing past Spec.RootSizeBytes fails with ENOSPC
// within the bound, the root stays usable, and removing the file gives
// the room back.
func testRootSizeBound(t *testing.T, rt sandbox.Runtime, rootfs string) {
	f := start(t, rt, rootfs, func(s *sandbox.Spec) {
		s.UID, s.GID = 0, 0
		s.RootSizeBytes = rootSize
	})
	got := f.Node(t, `const fs = require('fs');
const chunk = Buffer.alloc(1 << 20, 120);
let written = 0, code = 'none';
const fd = fs.openSync('/fill', 'w');
try {
  for (let i = 0; i < 128; i++) { written += fs.writeSync(fd, chunk); }
  fs.fsyncSync(fd);
} catch (e) { code = e.code; }
try { fs.closeSync(fd); } catch (e) { if (code === 'none') code = e.code; }
let small = 'none';
try { fs.writeFileSync('/root/small', 'x'.repeat(64 << 10)); } catch (e) { small = e.code; }
fs.unlinkSync('/fill');
fs.writeFileSync('/root/after', Buffer.alloc(8 << 20, 1));
console.log(code, written > `+strconv.Itoa(rootSize/2)+`, written <= `+strconv.Itoa(rootSize)+`, small, fs.statSync('/root/after').size);`)
	if want := "ENOSPC true true ENOSPC 8388608\n"; got != want {
		t.Errorf("filling a %d MiB root: %q, want %q (ENOSPC within the bound, room again once removed)", rootSize>>20, got, want)
	}
	f.OK(t, "sh", "-c", "echo still > /tmp/x && cat /tmp/x")
}

// treeDigest hashes the names, modes, owners, sizes, times and contents
// of everything under dir.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h.Write([]byte(rel + "\x00" + statDigest(t, p) + "\x00"))
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("digest %s: %v", dir, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// statDigest is p's mode, owner, size, mtime and ctime: what a write
// through p, or into it if a directory, changes.
func statDigest(t *testing.T, p string) string {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatalf("stat %s: %v", p, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return strings.Join([]string{fi.Mode().String(), strconv.Itoa(int(st.Uid)), strconv.Itoa(int(st.Gid)),
		strconv.FormatInt(fi.Size(), 10), strconv.FormatInt(st.Mtim.Nano(), 10), strconv.FormatInt(st.Ctim.Nano(), 10)}, " ")
}
