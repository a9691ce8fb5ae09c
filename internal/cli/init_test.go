package cli

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/deployments/build"
	"github.com/helmr/helmr/internal/testenv"
	sdkts "github.com/helmr/helmr/sdk/typescript"
)

// fakeTarball is a file named as the SDK's package, for the flag.
func fakeTarball(t *testing.T) (string, []byte) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "helmr-sdk-0.1.0.tgz")
	data := []byte("not really gzip: init copies it as it is")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, data
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestInitScaffolds: init in a new directory writes the project, named
// after the directory, with the SDK tarball vendored and package.json
// depending on that copy; the config and the task index as a deployment.
func TestInitScaffolds(t *testing.T) {
	env := testEnv(t)
	tgz, data := fakeTarball(t)
	dir := filepath.Join(t.TempDir(), "My Tasks!")
	out, errOut, code := helmr(t, env, "init", dir, "--sdk", tgz)
	if code != 0 {
		t.Fatalf("helmr init = exit %d, stderr %q", code, errOut)
	}
	var names []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			names = append(names, filepath.ToSlash(rel))
		}
		return err
	})
	want := []string{".gitignore", ".helmrignore", "helmr.config.ts", "package.json", "tasks/hello.ts", "tsconfig.json", "vendor/helmr-sdk-0.1.0.tgz"}
	if !slices.Equal(names, want) {
		t.Errorf("init wrote %q, want %q", names, want)
	}
	for _, name := range want {
		if !strings.Contains(out, "  "+name+"\n") {
			t.Errorf("init's output does not list %s:\n%s", name, out)
		}
	}
	for _, next := range []string{"cd '" + dir + "'", "npm install", "npx tsc --noEmit", "helmr dev --watch .", "helmr run hello"} {
		if !strings.Contains(out, next) {
			t.Errorf("init's output lacks the next command %q:\n%s", next, out)
		}
	}
	if got := readFile(t, filepath.Join(dir, "vendor", "helmr-sdk-0.1.0.tgz")); got != string(data) {
		t.Errorf("vendored tarball = %q, want a copy of --sdk's %q", got, data)
	}
	if got := readFile(t, filepath.Join(dir, "helmr.config.ts")); !strings.Contains(got, `project: "My-Tasks-",`) {
		t.Errorf("helmr.config.ts = %s, want the directory's name made valid", got)
	}
	var pkg struct {
		Name            string            `json:"name"`
		Type            string            `json:"type"`
		Dependencies    map[string]string `json:"dependencies"`
		DevDependencies map[string]string `json:"devDependencies"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "package.json"))), &pkg); err != nil {
		t.Fatalf("package.json: %v", err)
	}
	sdk, err := sdkPackage()
	if err != nil {
		t.Fatal(err)
	}
	if pkg.Name != "my-tasks-" || pkg.Type != "module" || pkg.Dependencies["@helmr/sdk"] != "file:vendor/helmr-sdk-0.1.0.tgz" ||
		pkg.DevDependencies["typescript"] != sdk.DevDependencies["typescript"] || pkg.DevDependencies["@types/node"] != sdk.DevDependencies["@types/node"] {
		t.Errorf("package.json = %+v, want module my-tasks- on the vendored SDK and the SDK's pinned typescript and @types/node", pkg)
	}
	ignore := strings.Split(readFile(t, filepath.Join(dir, ".helmrignore")), "\n")
	for _, line := range []string{"node_modules", ".helmr", ".git", "vendor/helmr-sdk-*.tgz"} {
		if !slices.Contains(ignore, line) {
			t.Errorf(".helmrignore lacks %q: %q", line, ignore)
		}
	}
	var tsconfig struct {
		CompilerOptions map[string]any `json:"compilerOptions"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "tsconfig.json"))), &tsconfig); err != nil || tsconfig.CompilerOptions["strict"] != true {
		t.Errorf("tsconfig.json = %+v (%v), want strict", tsconfig, err)
	}

	// What init wrote deploys: the config loads and tasks/hello.ts
	// indexes as the task hello, with its image and sandbox.
	_, err = exec.LookPath("node")
	testenv.Require(t, err == nil, "indexing a project needs node on PATH")
	res, err := build.Build(context.Background(), dir, build.Options{})
	if err != nil {
		t.Fatalf("build the scaffolded project: %v", err)
	}
	if res.Manifest.Project != "My-Tasks-" || len(res.Manifest.Tasks) != 1 || res.Manifest.Tasks[0].ID != "hello" {
		t.Errorf("manifest = project %q, tasks %+v; want My-Tasks- with the task hello", res.Manifest.Project, res.Manifest.Tasks)
	}
}

// TestInitDirectory: init refuses a directory with anything but dotfiles
// in it, writing nothing; dotfiles stay as they were.
func TestInitDirectory(t *testing.T) {
	env := testEnv(t)
	tgz, _ := fakeTarball(t)

	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "README.md"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := helmr(t, env, "init", full, "--sdk", tgz)
	if code != 1 || !strings.Contains(errOut, "is not empty (it holds README.md)") {
		t.Errorf("init in a directory with README.md = exit %d, %q; want 1 and why", code, errOut)
	}
	if entries, _ := os.ReadDir(full); len(entries) != 1 {
		t.Errorf("a refused init left %d entries, want only README.md", len(entries))
	}

	dots := t.TempDir()
	if err := os.Mkdir(filepath.Join(dots, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dots, ".gitignore"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := helmr(t, env, "init", dots, "--sdk", tgz, "--project", "api.v2")
	if code != 0 {
		t.Fatalf("init in a directory of dotfiles = exit %d, %q; want 0", code, errOut)
	}
	if got := readFile(t, filepath.Join(dots, ".gitignore")); got != "mine\n" {
		t.Errorf(".gitignore = %q, want the one that was there", got)
	}
	if !strings.Contains(out, ".gitignore (kept the one there)") {
		t.Errorf("init's output does not say it kept .gitignore:\n%s", out)
	}
	if got := readFile(t, filepath.Join(dots, "helmr.config.ts")); !strings.Contains(got, `project: "api.v2",`) {
		t.Errorf("helmr.config.ts = %s, want --project's name", got)
	}
}

// TestInitBadInput: each mistake is one clear error, and nothing written.
func TestInitBadInput(t *testing.T) {
	env := testEnv(t)
	tgz, _ := fakeTarball(t)
	other := t.TempDir()
	if err := os.WriteFile(filepath.Join(other, "package.json"), []byte(`{"name":"left-pad"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	unbuilt := t.TempDir()
	if err := os.WriteFile(filepath.Join(unbuilt, "package.json"), []byte(`{"name":"@helmr/sdk"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	zip := filepath.Join(t.TempDir(), "sdk.zip")
	if err := os.WriteFile(zip, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad project", []string{"--sdk", tgz, "--project", "no spaces"}, `--project "no spaces": a project name is`},
		{"two dirs", []string{"a", "b"}, "usage: helmr init [DIR]"},
		{"missing sdk", []string{"--sdk", filepath.Join(other, "nope.tgz")}, "--sdk: stat"},
		{"not a tarball", []string{"--sdk", zip}, "want an npm package tarball"},
		{"another package", []string{"--sdk", other}, `not the @helmr/sdk package's directory`},
		{"unbuilt sdk", []string{"--sdk", unbuilt}, "the SDK is not built (no dist/index.d.ts): run npm run build"},
		// The test binary has no SDK tarball beside it.
		{"no tarball beside helmr", nil, "no @helmr/sdk package next to helmr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "p")
			args := append([]string{"init"}, tc.args...)
			if tc.name != "two dirs" {
				args = append(args, dir)
			}
			_, errOut, code := helmr(t, env, args...)
			if code == 0 || !strings.Contains(errOut, tc.want) {
				t.Errorf("helmr %q = exit %d, %q; want an error with %q", args, code, errOut, tc.want)
			}
			if _, err := os.Stat(dir); err == nil {
				t.Errorf("helmr %q failed but created %s", args, dir)
			}
		})
	}
}

// TestInitSDKDirectory: --sdk with the SDK's (built) directory links it
// by a path relative to the project.
func TestInitSDKDirectory(t *testing.T) {
	env := testEnv(t)
	root := t.TempDir()
	sdk := filepath.Join(root, "sdk")
	if err := os.MkdirAll(filepath.Join(sdk, "dist"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"package.json": `{"name":"@helmr/sdk","version":"0.1.0"}`, "dist/index.d.ts": "export {};\n"} {
		if err := os.WriteFile(filepath.Join(sdk, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(root, "projects", "one")
	out, errOut, code := helmr(t, env, "init", dir, "--sdk", sdk, "--json")
	if code != 0 {
		t.Fatalf("init --sdk DIR = exit %d, %q", code, errOut)
	}
	var res initResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Project != "one" || res.Dir != dir || res.SDK != "file:../../sdk" ||
		!slices.Contains(res.Files, "tasks/hello.ts") || len(res.Kept) != 0 {
		t.Errorf("init --json = %s (%v), want project one in %s on file:../../sdk with its files", out, err, dir)
	}
	if got := readFile(t, filepath.Join(dir, "package.json")); !strings.Contains(got, `"@helmr/sdk": "file:../../sdk"`) {
		t.Errorf("package.json = %s, want @helmr/sdk linked as file:../../sdk", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "vendor")); err == nil {
		t.Errorf("init --sdk DIR made vendor/, want the directory linked instead")
	}
	if got := readFile(t, filepath.Join(dir, ".helmrignore")); strings.Contains(got, "vendor") {
		t.Errorf(".helmrignore = %q, want no vendor line without a vendored tarball", got)
	}
}

func TestProjectName(t *testing.T) {
	for _, tc := range []struct{ dir, want string }{
		{"hello", "hello"},
		{"My Tasks", "My-Tasks"},
		{"..dots", "dots"},
		{"_x", "x"},
		{"héllo wörld", "h-llo-w-rld"},
		{"日本", "tasks"},
		{strings.Repeat("a", 200), strings.Repeat("a", 128)},
	} {
		if got := projectName(tc.dir); got != tc.want {
			t.Errorf("projectName(%q) = %q, want %q", tc.dir, got, tc.want)
		}
	}
}

// packTarball writes an npm-style tarball (package/...) of files.
func packTarball(t *testing.T, files map[string][]byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "helmr-sdk-0.1.0.tgz")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for name, data := range files {
		if err := tw.WriteHeader(&tar.Header{Name: "package/" + name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []io.Closer{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestSameSDK: init warns when the tarball it vendors packs other SDK
// sources than the binary embeds (and deploys with).
func TestSameSDK(t *testing.T) {
	embedded := map[string][]byte{"package.json": sdkts.PackageJSON}
	err := fs.WalkDir(sdkts.FS, "src", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			embedded[p], err = fs.ReadFile(sdkts.FS, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sameSDK(packTarball(t, embedded)); err != nil {
		t.Errorf("sameSDK(the embedded sources) = %v, want nil", err)
	}
	edited := maps.Clone(embedded)
	edited["src/task.ts"] = append(slices.Clone(edited["src/task.ts"]), "\n// edited\n"...)
	if err := sameSDK(packTarball(t, edited)); err == nil || !strings.Contains(err.Error(), "src/task.ts differs") {
		t.Errorf("sameSDK(an edited task.ts) = %v, want it named", err)
	}
	extra := maps.Clone(embedded)
	extra["src/new.ts"] = []byte("export {};\n")
	if err := sameSDK(packTarball(t, extra)); err == nil || !strings.Contains(err.Error(), "source files") {
		t.Errorf("sameSDK(an extra source) = %v, want an error", err)
	}

	tgz, _ := fakeTarball(t)
	_, errOut, code := helmr(t, testEnv(t), "init", filepath.Join(t.TempDir(), "p"), "--sdk", tgz)
	if code != 0 || !strings.Contains(errOut, "warning: "+tgz+": not an npm package tarball") {
		t.Errorf("init with a tarball that is none = exit %d, %q; want 0 and a warning", code, errOut)
	}
}
