package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/helmr/helmr/internal/deployments"
)

func testResolver(t *testing.T) *Resolver {
	t.Helper()
	bases := t.TempDir()
	root := filepath.Join(bases, "tiny", "rootfs")
	for _, d := range []string{"usr/bin", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(root, "usr/bin/node"), nil, 0o755)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\nnode:x:1000:1001::/home/node:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(bases, "tiny", "config.json"), []byte(`{"env":{"PATH":"/usr/bin:/bin"},"user":"root"}`), 0o644)
	return &Resolver{BasesDir: bases, LayersDir: filepath.Join(t.TempDir(), "layers")}
}

func img(steps ...deployments.Step) *deployments.ImageManifest {
	return &deployments.ImageManifest{Name: "i", Steps: append([]deployments.Step{{Kind: "from", Ref: "helmr/tiny"}}, steps...)}
}

func TestPrepareCopyEnvUser(t *testing.T) {
	r := testResolver(t)
	files := map[string][]byte{
		"context/package.json":   []byte(`{"name":"x"}`),
		"context/src/a.ts":       []byte("a"),
		"context/src/lib/b.ts":   []byte("b"),
		"context/srcx/other.txt": []byte("not under src"),
	}
	m := img(
		deployments.Step{Kind: "copy", Dest: "/app/package.json", Source: &deployments.Source{Type: "file", Path: "package.json"}},
		deployments.Step{Kind: "copy", Dest: "/app/src", Source: &deployments.Source{Type: "directory", Path: "src"}},
		deployments.Step{Kind: "env", Key: "MODE", Value: "test"},
		deployments.Step{Kind: "workdir", Path: "/app"},
		deployments.Step{Kind: "user", User: "node"},
	)
	got, err := r.Prepare(context.Background(), m, files, PrepareOptions{})
	if err != nil {
		t.Fatalf("Prepare() = %v", err)
	}
	if len(got.Layers) != 3 {
		t.Fatalf("layers = %v, want the base and two copy layers", got.Layers)
	}
	for p, want := range map[string]string{"/app/package.json": `{"name":"x"}`, "/app/src/a.ts": "a", "/app/src/lib/b.ts": "b"} {
		host, ok := got.Lookup(p)
		data, _ := os.ReadFile(host)
		if !ok || string(data) != want {
			t.Errorf("Lookup(%q) = %q (%v), want %q", p, data, ok, want)
		}
	}
	if _, ok := got.Lookup("/app/src/other.txt"); ok {
		t.Errorf("a file of srcx/ was copied as part of src/")
	}
	if diff := cmp.Diff([]string{"PATH=/usr/bin:/bin", "MODE=test"}, got.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	uid, gid, home, err := got.ResolveUser()
	if err != nil || uid != 1000 || gid != 1001 || home != "/home/node" || got.Workdir != "/app" {
		t.Errorf("user = %d:%d %q %v, workdir %q", uid, gid, home, err, got.Workdir)
	}
	if node, err := got.FindNode(); err != nil || node != "/usr/bin/node" {
		t.Errorf("FindNode() = %q, %v", node, err)
	}
	// The same steps again reuse the cached layers and give the same digest.
	again, err := r.Prepare(context.Background(), m, files, PrepareOptions{})
	if err != nil || again.Digest != got.Digest || !cmp.Equal(again.Layers, got.Layers) {
		t.Errorf("second Prepare = %+v, %v; want the same layers and digest", again, err)
	}
	files["context/src/a.ts"] = []byte("changed")
	changed, _ := r.Prepare(context.Background(), m, files, PrepareOptions{})
	if changed.Digest == got.Digest || changed.Layers[2] == got.Layers[2] || changed.Layers[1] != got.Layers[1] {
		t.Errorf("changing a copied file: digest %s→%s, layers %v→%v; want only the second copy layer rebuilt", got.Digest, changed.Digest, got.Layers, changed.Layers)
	}
}

func TestPrepareErrors(t *testing.T) {
	r := testResolver(t)
	cases := []struct {
		name string
		m    *deployments.ImageManifest
		want string
	}{
		{"unreachable registry", &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: "127.0.0.1:1/none/base:v1"}}}, "helmr/tiny"},
		{"not a reference", &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: "Not A Ref!"}}}, "not a built-in base"},
		{"base not built", &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: "helmr/absent"}}}, "build-base-rootfs.sh"},
		{"escaping base name", &deployments.ImageManifest{Steps: []deployments.Step{{Kind: "from", Ref: "helmr/../x"}}}, "not available"},
		{"run step without a runner", img(deployments.Step{Kind: "run", Argv: []string{"true"}}), "run steps need the gvisor tier"},
		{"missing copy source", img(deployments.Step{Kind: "copy", Dest: "/x", Source: &deployments.Source{Type: "file", Path: "nope"}}), "no files"},
		{"unknown user", img(deployments.Step{Kind: "user", User: "ghost"}), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := r.Prepare(context.Background(), c.m, map[string][]byte{}, PrepareOptions{})
			if c.name == "unknown user" {
				_, _, _, err = got.ResolveUser()
			}
			if !errors.Is(err, ErrPreparation) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %v, want an image preparation error containing %q", err, c.want)
			}
		})
	}
	noNode := img(deployments.Step{Kind: "env", Key: "PATH", Value: "/nowhere"})
	got, _ := r.Prepare(context.Background(), noNode, nil, PrepareOptions{})
	if _, err := got.FindNode(); !errors.Is(err, ErrPreparation) || !strings.Contains(err.Error(), "node") {
		t.Errorf("FindNode() without node on PATH = %v", err)
	}
}

func TestBaseDigestFollowsContent(t *testing.T) {
	r := testResolver(t)
	root := filepath.Join(r.BasesDir, "tiny", "rootfs")
	d1, err := TreeDigest(root)
	if err != nil || !strings.HasPrefix(d1, "sha256:") {
		t.Fatalf("TreeDigest = %q, %v", d1, err)
	}
	// Timestamps do not count.
	future := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(root, "etc/passwd"), future, future)
	if d, _ := TreeDigest(root); d != d1 {
		t.Errorf("digest changed with an mtime: %s → %s", d1, d)
	}
	// Content, modes and links do.
	changes := []func(){
		func() { os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/:/bin/sh\n"), 0o644) },
		func() { os.Chmod(filepath.Join(root, "usr/bin/node"), 0o700) },
		func() { os.Symlink("/usr/bin/node", filepath.Join(root, "usr/bin/nodejs")) },
		func() { os.Mkdir(filepath.Join(root, "srv"), 0o755) },
	}
	seen := map[string]bool{d1: true}
	for i, change := range changes {
		change()
		d, err := TreeDigest(root)
		if err != nil || seen[d] {
			t.Errorf("change %d: digest %s (%v) not new", i, d, err)
		}
		seen[d] = true
	}
	// BaseDigest caches the digest with the base, and image digests follow it.
	bd, err := r.BaseDigest("helmr/tiny")
	if want, _ := TreeDigest(root); err != nil || bd != want {
		t.Errorf("BaseDigest = %q, %v; want %q", bd, err, want)
	}
	if _, err := os.Stat(filepath.Join(r.BasesDir, "tiny", digestFile)); err != nil {
		t.Errorf("digest not cached: %v", err)
	}
	before, err := r.Prepare(context.Background(), img(), nil, PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(r.BasesDir, "tiny", digestFile)) // as a rebuilt base has none
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("rebuilt\n"), 0o644)
	after, err := r.Prepare(context.Background(), img(), nil, PrepareOptions{})
	if err != nil || after.Digest == before.Digest {
		t.Errorf("image digest %s did not change with the base's content (%v)", after.Digest, err)
	}
	if _, err := r.BaseDigest("registry.example/x"); err == nil {
		t.Error("BaseDigest of a non-base succeeded")
	}
}

func TestNodeVersionOK(t *testing.T) {
	for v, want := range map[string]bool{
		"22.18.0": true, "v22.18.0": true, "22.23.3": true, "24.1.0": true, "22.17.9": false, "18.19.0": false,
		"22.18": true, "garbage": false, "": false, "23.0.0-nightly2026": true,
	} {
		if got := NodeVersionOK(v); got != want {
			t.Errorf("NodeVersionOK(%q) = %v, want %v", v, got, want)
		}
	}
}
