package build

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/testenv"
)

func requireNode(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath("node")
	testenv.Require(t, err == nil, "deploy builds need node on PATH")
}

func TestBuildExamples(t *testing.T) {
	requireNode(t)
	root := testenv.RepoRoot()
	res, err := Build(context.Background(), filepath.Join(root, "examples", "hello"), Options{})
	if err != nil {
		t.Fatalf("Build(examples/hello): %v", err)
	}
	m := res.Manifest
	if m.Project != "hello" || len(m.Tasks) != 1 {
		t.Fatalf("manifest = %+v, want project hello with one task", m)
	}
	task := m.Tasks[0]
	if task.ID != "hello" || task.Module != "bundles/tasks/hello.mjs" || task.Export != "hello" || !task.HasRun ||
		task.MaxDuration != 60 || task.Sandbox.Resources.Memory != "512Mi" {
		t.Errorf("task = %+v", task)
	}
	if _, ok := res.Files[task.Module]; !ok {
		t.Errorf("files lack the task bundle %s", task.Module)
	}

	// review-pr declares run steps, a cache, a secret and a copied file.
	res, err = Build(context.Background(), filepath.Join(root, "examples", "review-pr"), Options{})
	if err != nil {
		t.Fatalf("Build(examples/review-pr): %v", err)
	}
	if _, ok := res.Files[deployments.ContextPath("package.json")]; !ok {
		t.Errorf("review-pr files lack the copied package.json; have %v", keys(res.Files))
	}
	rp := res.Manifest.Tasks[0]
	if rp.Secrets["OPENAI_API_KEY"].Env != "OPENAI_API_KEY" {
		t.Errorf("review-pr secrets = %+v", rp.Secrets)
	}
}

func TestBuildErrors(t *testing.T) {
	requireNode(t)
	td := filepath.Join(testenv.RepoRoot(), "internal", "e2e", "testdata")
	cases := []struct {
		dir  string
		want []string
	}{
		{"badconfig", []string{"helmr.config.ts"}},
		{"norun", []string{`task "norun"`, "run"}},
		{"dupe", []string{"same"}},
		{"reserved", []string{"/tmp/work"}},
		{"missing", []string{"no helmr.config.ts"}},
	}
	for _, c := range cases {
		t.Run(c.dir, func(t *testing.T) {
			_, err := Build(context.Background(), filepath.Join(td, c.dir), Options{})
			if err == nil || !errors.Is(err, ErrBuild) {
				t.Fatalf("Build(%s) = %v, want a %s error", c.dir, err, Class)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Build(%s) error %q lacks %q", c.dir, err, w)
				}
			}
		})
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestCopySourcesIgnoreAndModes: directory copy sources skip what the
// project's .helmrignore excludes, and the manifest lists the executable
// files of each copy source.
func TestCopySourcesIgnoreAndModes(t *testing.T) {
	requireNode(t)
	dir := t.TempDir()
	write := func(p, content string, mode os.FileMode) {
		t.Helper()
		full := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("helmr.config.ts", `import { defineConfig } from "@helmr/sdk";
export default defineConfig({ project: "ign", dirs: ["./tasks"] });
`, 0o644)
	write("tasks/t.ts", `import { image, sandbox, source, task } from "@helmr/sdk";
const img = image("i").from("helmr/bookworm-node22").copy("/app/", source.directory("app"));
export const t = task({ id: "t", sandbox: sandbox("s").image(img), run: async () => 1 });
`, 0o644)
	write(".helmrignore", "# build output\n*.log\n**/*.log\napp/secret\n**/cache\n!app/keep.log\n", 0o644)
	write("app/run.sh", "#!/bin/sh\n", 0o755)
	write("app/main.js", "1\n", 0o644)
	write("app/debug.log", "x\n", 0o644)
	write("app/keep.log", "kept\n", 0o644)
	write("app/secret/key", "k\n", 0o600)
	write("app/deep/cache/blob", "b\n", 0o644)
	res, err := Build(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range res.Files {
		if strings.HasPrefix(k, "context/") {
			got = append(got, strings.TrimPrefix(k, "context/"))
		}
	}
	slices.Sort(got)
	if want := []string{"app/keep.log", "app/main.js", "app/run.sh"}; !slices.Equal(got, want) {
		t.Errorf("copied files = %v, want %v", got, want)
	}
	src := res.Manifest.Tasks[0].Sandbox.Image.Steps[1].Source
	if !slices.Equal(src.Executables, []string{"app/run.sh"}) {
		t.Errorf("executables = %v, want [app/run.sh]", src.Executables)
	}
}
