package images

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/testenv"
)

type entry struct {
	name, body, link string
	mode             int64
	uid              int
	typ              byte
}

func tarLayer(t *testing.T, entries ...entry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.uid, Typeflag: typ, Linkname: e.link, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			io.WriteString(tw, e.body)
		}
	}
	tw.Close()
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage is a two-layer image: the second layer deletes a file of the
// first (a whiteout) and adds one; its config sets env, workdir and user.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	l1 := tarLayer(t,
		entry{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "etc/os-release", body: "ID=test\n", mode: 0o644},
		entry{name: "etc/passwd", body: "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n", mode: 0o644},
		entry{name: "usr/bin/tool", body: "#!/bin/sh\n", mode: 0o755},
		entry{name: "usr/bin/tool-link", typ: tar.TypeSymlink, link: "tool"},
		entry{name: "home/app/", typ: tar.TypeDir, mode: 0o750, uid: 1000},
		entry{name: "home/app/notes", body: "mine\n", mode: 0o600, uid: 1000},
	)
	l2 := tarLayer(t,
		entry{name: "etc/.wh.os-release", mode: 0o644},
		entry{name: "etc/added", body: "layer 2\n", mode: 0o644},
	)
	img, err := mutate.AppendLayers(empty.Image, l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/usr/bin:/bin", "GREETING=hi"}
	cf.Config.WorkingDir = "/home/app"
	cf.Config.User = "app"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func checkTestImage(t *testing.T, got Image) {
	t.Helper()
	if _, ok := got.Lookup("/etc/os-release"); ok {
		t.Error("the file the second layer deleted is there")
	}
	for _, p := range []string{"/etc/added", "/usr/bin/tool", "/home/app/notes"} {
		if _, ok := got.Lookup(p); !ok {
			t.Errorf("%s missing from the unpacked image", p)
		}
	}
	if p, _ := got.Lookup("/usr/bin/tool-link"); p != "" {
		if target, err := os.Readlink(p); err != nil || target != "tool" {
			t.Errorf("symlink = %q, %v", target, err)
		}
	}
	if p, ok := got.Lookup("/home/app/notes"); ok {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil || st.Uid != 1000 || st.Mode&0o777 != 0o600 {
			t.Errorf("/home/app/notes: uid %d mode %o (%v), want 1000 and 0600", st.Uid, st.Mode&0o777, err)
		}
	}
	if got.Workdir != "/home/app" || got.User != "app" || !slices.Contains(got.Env, "GREETING=hi") {
		t.Errorf("config: workdir %q user %q env %v, want the image's", got.Workdir, got.User, got.Env)
	}
	if uid, _, home, err := got.ResolveUser(); err != nil || uid != 1000 || home != "/home/app" {
		t.Errorf("ResolveUser = %d %q %v", uid, home, err)
	}
}

func TestRegistryBase(t *testing.T) {
	testenv.RequireRoot(t) // unpacking keeps owners
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	ref := u.Host + "/team/base:v1"
	tag, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	src := testImage(t)
	if err := remote.Write(tag, src); err != nil {
		t.Fatal(err)
	}
	r := testResolver(t)
	got, err := r.Prepare(context.Background(), &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: ref}}}, nil, PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkTestImage(t, got)
	// The same digest is unpacked once; a new push under the tag is pulled.
	again, err := r.Prepare(context.Background(), &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: ref}}}, nil, PrepareOptions{})
	if err != nil || again.Digest != got.Digest || !slices.Equal(again.Layers, got.Layers) {
		t.Errorf("second prepare: %v, digest %s vs %s", err, again.Digest, got.Digest)
	}
	next, _ := mutate.AppendLayers(src, tarLayer(t, entry{name: "etc/v2", body: "2\n", mode: 0o644}))
	if err := remote.Write(tag, next); err != nil {
		t.Fatal(err)
	}
	moved, err := r.Prepare(context.Background(), &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: ref}}}, nil, PrepareOptions{})
	if err != nil || moved.Digest == got.Digest {
		t.Fatalf("after a push to the tag: %v, digest unchanged", err)
	}
	if _, ok := moved.Lookup("/etc/v2"); !ok {
		t.Error("the tag's new image was not pulled")
	}
	// Pinned to what a deploy-time build resolved: the old image, though
	// the tag moved; the same image digest as that build.
	pinned, err := r.Prepare(context.Background(), &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: ref}}}, nil,
		PrepareOptions{BaseDigest: got.BaseDigest})
	if err != nil || pinned.Digest != got.Digest || pinned.BaseDigest != got.BaseDigest {
		t.Errorf("pinned to %s: %v, digest %s, want %s", got.BaseDigest, err, pinned.Digest, got.Digest)
	} else if _, ok := pinned.Lookup("/etc/v2"); ok {
		t.Error("the pinned prepare has the moved tag's file")
	}
	// A built-in base is this worker's own: one with another digest than
	// the deploy's is an error, not a different image.
	other := "sha256:" + strings.Repeat("0", 64)
	_, err = r.Prepare(context.Background(), img(), nil, PrepareOptions{BaseDigest: other})
	if err == nil || !strings.Contains(err.Error(), "not "+other+", the one the image was built on at deploy") {
		t.Errorf("built-in base pinned to another digest = %v, want the mismatch named", err)
	}
	for _, bad := range []string{u.Host + "/team/missing:v1", "UPPER/Case::bad"} {
		_, err := r.Prepare(context.Background(), &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: bad}}}, nil, PrepareOptions{})
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("from %q = %v, want an error naming it", bad, err)
		}
	}
}

func TestOCILayoutBase(t *testing.T) {
	testenv.RequireRoot(t)
	r := testResolver(t)
	r.ImagesDir = t.TempDir()
	p, err := layout.Write(filepath.Join(r.ImagesDir, "team-base"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(testImage(t)); err != nil {
		t.Fatal(err)
	}
	got, err := r.Prepare(context.Background(), &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: "oci:team-base"}}}, nil, PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkTestImage(t, got)
	for ref, want := range map[string]string{"oci:absent": "no OCI layout", "oci:../etc": "not an image name"} {
		_, err := r.Prepare(context.Background(), &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: ref}}}, nil, PrepareOptions{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("from %q = %v, want %q", ref, err, want)
		}
	}
}

func TestExtractTarStaysInside(t *testing.T) {
	testenv.RequireRoot(t)
	outside := t.TempDir()
	for name, entries := range map[string][]entry{
		"through a symlink": {
			{name: "evil", typ: tar.TypeSymlink, link: outside},
			{name: "evil/planted", body: "x", mode: 0o644},
		},
		"hard link through a symlink": {
			{name: "evil", typ: tar.TypeSymlink, link: outside},
			{name: "link", typ: tar.TypeLink, link: "evil/secret"},
		},
	} {
		os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o600)
		dst := t.TempDir()
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, e := range entries {
			typ := e.typ
			if typ == 0 {
				typ = tar.TypeReg
			}
			tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: typ, Linkname: e.link, Mode: e.mode, Size: int64(len(e.body))})
			if typ == tar.TypeReg {
				io.WriteString(tw, e.body)
			}
		}
		tw.Close()
		if err := extractTar(&buf, dst); err == nil {
			t.Errorf("%s: extracted without error", name)
		}
		if _, err := os.Stat(filepath.Join(outside, "planted")); err == nil {
			t.Errorf("%s: a file was written outside the root", name)
		}
	}
	// ".." cannot climb out: the entry lands inside.
	dst := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "../../escaped", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	io.WriteString(tw, "x")
	tw.Close()
	if err := extractTar(&buf, dst); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dst, "escaped")); err != nil {
		t.Errorf("../../escaped did not land inside the root: %v", err)
	}
}
