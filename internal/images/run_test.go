package images

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/testenv"
)

// fakeRunner stands in for a sandbox tier: it "runs" a step by writing
// /steps/<argv[0]> into the upper layer, and fails steps named "fail".
type fakeRunner struct {
	calls []StepRequest
}

func (f *fakeRunner) RunStep(_ context.Context, req StepRequest) error {
	f.calls = append(f.calls, req)
	req.Output("stdout", []byte("running "+req.Argv[0]+"\n"))
	if req.Argv[0] == "fail" {
		for i := range 30 {
			req.Output("stderr", []byte(fmt.Sprintf("error line %d\n", i)))
		}
		return fmt.Errorf("%w: exit code 3", ErrStepFailed)
	}
	if err := os.MkdirAll(filepath.Join(req.Upper, "steps"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(req.Upper, "steps", req.Argv[0]), []byte(strings.Join(req.Env, "\n")), 0o644)
}

func run(argv ...string) deployments.Step { return deployments.Step{Kind: "run", Argv: argv} }

func TestRunStepsAreCachedByTheirInputs(t *testing.T) {
	r := testResolver(t)
	f := &fakeRunner{}
	r.Runner, r.CachesDir = f, t.TempDir()
	var out strings.Builder
	opts := PrepareOptions{Scope: "proj", Output: func(step int, stream string, data []byte) { out.Write(data) }}
	m := img(run("one"), deployments.Step{Kind: "env", Key: "A", Value: "1"}, run("two"))
	first, err := r.Prepare(context.Background(), m, nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 2 || len(first.Layers) != 3 {
		t.Fatalf("first build: %d steps run, layers %v; want 2 and base+2", len(f.calls), first.Layers)
	}
	// The second step saw the env set before it.
	if !slices.Contains(f.calls[1].Env, "A=1") || slices.Contains(f.calls[0].Env, "A=1") {
		t.Errorf("step envs = %v / %v, want A=1 only in the second", f.calls[0].Env, f.calls[1].Env)
	}
	if p, ok := first.Lookup("/steps/two"); !ok || !strings.HasPrefix(p, r.LayersDir) {
		t.Errorf("Lookup(/steps/two) = %q, %v", p, ok)
	}
	if !strings.Contains(out.String(), "step 1: run one\nrunning one\n") {
		t.Errorf("build output %q lacks the step header and its output", out.String())
	}

	// Nothing changed: nothing runs, same layers, same digest.
	out.Reset()
	again, err := r.Prepare(context.Background(), m, nil, opts)
	if err != nil || len(f.calls) != 2 || again.Digest != first.Digest || !slices.Equal(again.Layers, first.Layers) {
		t.Fatalf("rebuild: %d steps run (%v), digest %s vs %s", len(f.calls), err, again.Digest, first.Digest)
	}
	if !strings.Contains(out.String(), "step 3: run two (cached)") {
		t.Errorf("rebuild output %q does not say the steps were cached", out.String())
	}

	// Changing the env step re-runs only what follows it.
	m2 := img(run("one"), deployments.Step{Kind: "env", Key: "A", Value: "2"}, run("two"))
	if _, err := r.Prepare(context.Background(), m2, nil, opts); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 3 || f.calls[2].Argv[0] != "two" {
		t.Errorf("after changing step 2, ran %d steps (last %v), want only step 3 again", len(f.calls), f.calls[len(f.calls)-1].Argv)
	}
	// Changing the first step re-runs everything after it.
	m3 := img(run("zero"), deployments.Step{Kind: "env", Key: "A", Value: "2"}, run("two"))
	if _, err := r.Prepare(context.Background(), m3, nil, opts); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 5 {
		t.Errorf("after changing step 1, %d steps run in all, want 5", len(f.calls))
	}
}

func TestFailingRunStep(t *testing.T) {
	r := testResolver(t)
	r.Runner, r.CachesDir = &fakeRunner{}, t.TempDir()
	_, err := r.Prepare(context.Background(), img(run("ok"), run("fail", "--hard")), nil, PrepareOptions{Scope: "p"})
	if !errors.Is(err, ErrPreparation) || !errors.Is(err, ErrStepFailed) {
		t.Fatalf("Prepare = %v, want a preparation error for a failed step", err)
	}
	for _, want := range []string{"step 2 (run fail --hard)", "exit code 3", "error line 29"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "error line 9\n") {
		t.Errorf("error %q carries more than the last lines of output", err)
	}
	ents, _ := os.ReadDir(r.LayersDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".build-") {
			t.Errorf("a failed step left %s behind", e.Name())
		}
	}
	if len(ents) != 1 {
		t.Errorf("layers after the failure: %v, want only the first step's", ents)
	}
}

func TestRunStepCachesAndWorkdir(t *testing.T) {
	testenv.RequireRoot(t) // chowns to the image user
	r := testResolver(t)
	f := &fakeRunner{}
	r.Runner, r.CachesDir = f, t.TempDir()
	m := img(deployments.Step{Kind: "user", User: "node"}, deployments.Step{Kind: "workdir", Path: "/home/node/app"},
		deployments.Step{Kind: "run", Argv: []string{"npm"}, Cache: []deployments.CacheMount{{MountPath: "/home/node/.npm", Cache: "npm"}}})
	if _, err := r.Prepare(context.Background(), m, nil, PrepareOptions{Scope: "proj"}); err != nil {
		t.Fatal(err)
	}
	req := f.calls[0]
	host := filepath.Join(r.CachesDir, "proj", "npm")
	if len(req.Caches) != 1 || req.Caches[0].Source != host || req.Caches[0].Dest != "/home/node/.npm" {
		t.Errorf("cache mounts = %+v, want %s at /home/node/.npm", req.Caches, host)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(host, &st); err != nil || st.Uid != 1000 || st.Gid != 1001 {
		t.Errorf("cache dir owner %d:%d (%v), want the step's user 1000:1001", st.Uid, st.Gid, err)
	}
	if req.UID != 1000 || req.GID != 1001 || req.Workdir != "/home/node/app" {
		t.Errorf("step ran as %d:%d in %s", req.UID, req.GID, req.Workdir)
	}
	// The workdir the image lacked was made in the step's layer, owned by
	// the step's user.
	built, err := r.Prepare(context.Background(), m, nil, PrepareOptions{Scope: "proj"})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := built.Lookup("/home/node/app")
	if !ok {
		t.Fatal("workdir not in the image")
	}
	if err := syscall.Stat(p, &st); err != nil || st.Uid != 1000 {
		t.Errorf("workdir owner %d (%v), want 1000", st.Uid, err)
	}
	for _, bad := range []string{"../x", "a/b"} {
		m := img(deployments.Step{Kind: "run", Argv: []string{"x"}, Cache: []deployments.CacheMount{{MountPath: "/c", Cache: bad}}})
		if _, err := r.Prepare(context.Background(), m, nil, PrepareOptions{Scope: "proj"}); err == nil {
			t.Errorf("cache name %q accepted", bad)
		}
	}
}

func TestLookupFollowsWhiteouts(t *testing.T) {
	testenv.RequireRoot(t) // whiteouts are device nodes; opaque marks are trusted xattrs
	lower, upper := t.TempDir(), t.TempDir()
	for _, p := range []string{"etc/a", "etc/b", "var/lib/x/1", "var/lib/y"} {
		os.MkdirAll(filepath.Join(lower, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(lower, p), []byte(p), 0o644)
	}
	os.MkdirAll(filepath.Join(upper, "etc"), 0o755)
	os.MkdirAll(filepath.Join(upper, "var/lib/x"), 0o755)
	if err := unix.Mknod(filepath.Join(upper, "etc/a"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(upper, "var/lib/y"), unix.S_IFCHR, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(upper, "var/lib/x"), "trusted.overlay.opaque", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(upper, "var/lib/x/2"), []byte("new"), 0o644)
	im := Image{Layers: []string{lower, upper}}
	for p, want := range map[string]bool{
		"/etc/a": false, "/etc/b": true, "/var/lib/y": false, "/var/lib/x/1": false, "/var/lib/x/2": true, "/etc": true, "/": true, "/nope": false,
	} {
		if _, ok := im.Lookup(p); ok != want {
			t.Errorf("Lookup(%s) = %v, want %v", p, ok, want)
		}
	}
}

func TestCopyFrom(t *testing.T) {
	testenv.RequireRoot(t) // merges the source image's layers with an overlay mount
	r := testResolver(t)
	f := &fakeRunner{}
	r.Runner, r.CachesDir = f, t.TempDir()
	files := map[string][]byte{"context/tool.sh": []byte("#!/bin/sh\necho tool\n")}
	builder := img(deployments.Step{Kind: "copy", Dest: "/src/tool.sh", Source: &deployments.Source{Type: "file", Path: "tool.sh"}},
		run("compile"))
	builder.Name = "builder"
	target := func(src, dest string) *deployments.ImageManifest {
		return img(deployments.Step{Kind: "copyFrom", Image: builder, Src: src, Dest: dest})
	}
	got, err := r.Prepare(context.Background(), target("/steps", "/opt/built"), files, PrepareOptions{Scope: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := got.Lookup("/opt/built/compile"); !ok {
		t.Errorf("the copied directory's contents are missing: %v", got.Layers)
	} else if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Errorf("copied file mode %v, want 0644 as in the source", fi.Mode())
	}
	if _, ok := got.Lookup("/src/tool.sh"); ok {
		t.Error("copyFrom brought in more than its source path")
	}
	// A file into a directory destination; it comes from a lower layer of
	// the source image, so the merged view is what is copied.
	one, err := r.Prepare(context.Background(), target("/src/tool.sh", "/usr/local/bin/"), files, PrepareOptions{Scope: "p"})
	if err != nil {
		t.Fatal(err)
	}
	p, ok := one.Lookup("/usr/local/bin/tool.sh")
	if !ok {
		t.Fatal("the copied file is missing")
	}
	if b, _ := os.ReadFile(p); string(b) != "#!/bin/sh\necho tool\n" {
		t.Errorf("copied file = %q", b)
	}
	// Rebuilt unchanged: same layer, the builder's step not run again.
	runs := len(f.calls)
	again, err := r.Prepare(context.Background(), target("/src/tool.sh", "/usr/local/bin/"), files, PrepareOptions{Scope: "p"})
	if err != nil || again.Digest != one.Digest || len(f.calls) != runs {
		t.Errorf("unchanged rebuild: digest %s vs %s, %d more steps run (%v)", again.Digest, one.Digest, len(f.calls)-runs, err)
	}
	// The source's content changed: a new layer.
	files["context/tool.sh"] = []byte("#!/bin/sh\necho tool v2\n")
	changed, err := r.Prepare(context.Background(), target("/src/tool.sh", "/usr/local/bin/"), files, PrepareOptions{Scope: "p"})
	if err != nil || changed.Digest == one.Digest {
		t.Fatalf("after changing the source image: digest %s (%v), want a new one", changed.Digest, err)
	}
	if p, _ := changed.Lookup("/usr/local/bin/tool.sh"); p != "" {
		if b, _ := os.ReadFile(p); string(b) != "#!/bin/sh\necho tool v2\n" {
			t.Errorf("copied file after the change = %q", b)
		}
	}
	if _, err := r.Prepare(context.Background(), target("/nope", "/x"), files, PrepareOptions{Scope: "p"}); err == nil || !strings.Contains(err.Error(), "/nope is not in the source image") {
		t.Errorf("copyFrom of a missing path = %v", err)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mounts), "helmr-image-") {
		t.Error("a merged view of the source image is still mounted")
	}
}

func TestNoCacheRunsAgain(t *testing.T) {
	r := testResolver(t)
	f := &fakeRunner{}
	r.Runner, r.CachesDir = f, t.TempDir()
	m := img(run("one"))
	first, err := r.Prepare(context.Background(), m, nil, PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.Prepare(context.Background(), m, nil, PrepareOptions{NoCache: true})
	if err != nil || len(f.calls) != 2 {
		t.Fatalf("--no-cache rebuild: %d steps run in all (%v), want 2", len(f.calls), err)
	}
	if !slices.Equal(again.Layers, first.Layers) {
		t.Errorf("layers %v, want the same paths with the new content", again.Layers)
	}
	if _, ok := again.Lookup("/steps/one"); !ok {
		t.Error("the rebuilt layer is empty")
	}
}

func TestCopyModesAndOwner(t *testing.T) {
	testenv.RequireRoot(t)
	r := testResolver(t)
	files := map[string][]byte{"context/bin/run.sh": []byte("#!/bin/sh\n"), "context/bin/data.txt": []byte("d\n")}
	src := &deployments.Source{Type: "directory", Path: "bin", Executables: []string{"bin/run.sh"}}
	stat := func(im Image, p string) (os.FileMode, uint32, uint32) {
		t.Helper()
		hp, ok := im.Lookup(p)
		if !ok {
			t.Fatalf("%s missing", p)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(hp, &st); err != nil {
			t.Fatal(err)
		}
		return os.FileMode(st.Mode & 0o7777), st.Uid, st.Gid
	}
	plain, err := r.Prepare(context.Background(), img(deployments.Step{Kind: "copy", Dest: "/usr/bin/", Source: src}), files, PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m, u, _ := stat(plain, "/usr/bin/run.sh"); m != 0o755 || u != 0 {
		t.Errorf("executable copied as %o owned by %d, want 0755 root", m, u)
	}
	if m, _, _ := stat(plain, "/usr/bin/data.txt"); m != 0o644 {
		t.Errorf("plain file copied as %o, want 0644", m)
	}
	mode := uint32(0o640)
	owned, err := r.Prepare(context.Background(), img(deployments.Step{Kind: "copy", Dest: "/usr/bin/app/", Source: src, Owner: "node", Mode: &mode}), files, PrepareOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m, u, g := stat(owned, "/usr/bin/app/run.sh"); m != 0o640 || u != 1000 || g != 1001 {
		t.Errorf("owned copy: %o %d:%d, want 0640 1000:1001", m, u, g)
	}
	if _, u, _ := stat(owned, "/usr/bin/app"); u != 1000 {
		t.Errorf("the new directory is owned by %d, want the copy's owner", u)
	}
	if m, u, _ := stat(owned, "/usr/bin"); u != 0 || m != 0o755 {
		t.Errorf("the image's /usr/bin became %o owned by %d; the copy must not change it", m, u)
	}
	if _, err := r.Prepare(context.Background(), img(deployments.Step{Kind: "copy", Dest: "/x", Source: src, Owner: "ghost"}), files, PrepareOptions{}); err == nil {
		t.Error("a copy owned by an unknown user was prepared")
	}
}
