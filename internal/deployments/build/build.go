// Package build turns a task project on disk into a deployment: it bundles
// helmr.config.ts and every task module with esbuild, indexes the manifest by
// running the bundles under the host's node, collects the project files that
// image steps copy, and validates the result.
package build

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/tsbundle"
)

// Class is the failure class of every build error.
const Class = "deployment_build"

// ErrBuild wraps every build failure, so callers can report Class.
var ErrBuild = errors.New(Class)

// ConfigFiles are the names a project's config may have, in lookup order.
var ConfigFiles = []string{"helmr.config.ts", "helmr.config.mts", "helmr.config.js", "helmr.config.mjs"}

// MaxContextBytes bounds the project files image steps may copy.
const MaxContextBytes = 48 << 20

// Result is a built deployment, ready to upload.
type Result struct {
	Manifest deployments.Manifest
	Files    map[string][]byte
	Config   Config
}

// Config is the project's helmr.config.ts default export.
type Config struct {
	Project string   `json:"project"`
	Dirs    []string `json:"dirs"`
	// Retry is the retry policy of the tasks that declare none.
	Retry *deployments.RetryPolicy `json:"retry,omitempty"`
}

// Options tune a build.
type Options struct {
	Node     string            // node binary for indexing; default "node" on PATH
	Progress func(msg string)  // optional progress lines
	Timeout  time.Duration     // indexing timeout; default 30s
	Env      map[string]string // unused for now; reserved for build-time variables
}

// Build builds the task project in dir.
func Build(ctx context.Context, dir string, opts Options) (Result, error) {
	if opts.Node == "" {
		opts.Node = "node"
	}
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrBuild, err)
	}
	work, err := os.MkdirTemp("", "helmr-build-")
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrBuild, err)
	}
	defer os.RemoveAll(work)
	runner, err := writeIndexRunner(work)
	if err != nil {
		return Result{}, err
	}
	cfg, err := loadConfig(ctx, dir, work, runner, opts)
	if err != nil {
		return Result{}, err
	}
	progress(fmt.Sprintf("project %s: looking for task modules in %s", cfg.Project, strings.Join(cfg.Dirs, ", ")))
	modules, err := findModules(dir, cfg.Dirs)
	if err != nil {
		return Result{}, err
	}
	files := map[string][]byte{}
	for _, m := range modules {
		code, err := tsbundle.TaskModule(dir, filepath.Join(dir, m))
		if err != nil {
			return Result{}, fmt.Errorf("%w: bundle %s: %v", ErrBuild, m, err)
		}
		out := bundlePath(m)
		files[out] = code
		progress(fmt.Sprintf("bundled %s → %s (%d bytes)", m, out, len(code)))
	}
	man, err := index(ctx, work, runner, files, opts)
	if err != nil {
		return Result{}, err
	}
	man.Project = cfg.Project
	for i := range man.Tasks {
		if man.Tasks[i].Retry == nil && cfg.Retry != nil {
			r := *cfg.Retry
			man.Tasks[i].Retry = &r
		}
	}
	if err := addContext(dir, man, files); err != nil {
		return Result{}, err
	}
	if err := man.Validate(files); err != nil {
		return Result{}, fmt.Errorf("%w: %w", ErrBuild, err)
	}
	progress(fmt.Sprintf("indexed %d task(s)", len(man.Tasks)))
	return Result{Manifest: man, Files: files, Config: cfg}, nil
}

func writeIndexRunner(work string) (string, error) {
	code, err := tsbundle.IndexRunner()
	if err != nil {
		return "", fmt.Errorf("%w: index runner: %v", ErrBuild, err)
	}
	p := filepath.Join(work, "index-runner.mjs")
	return p, os.WriteFile(p, code, 0o644)
}

func loadConfig(ctx context.Context, dir, work, runner string, opts Options) (Config, error) {
	var cfgPath string
	for _, name := range ConfigFiles {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			cfgPath = filepath.Join(dir, name)
			break
		}
	}
	if cfgPath == "" {
		return Config{}, fmt.Errorf("%w: no helmr.config.ts in %s", ErrBuild, dir)
	}
	code, err := tsbundle.TaskModule(dir, cfgPath)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %s: %v", ErrBuild, filepath.Base(cfgPath), err)
	}
	if err := os.WriteFile(filepath.Join(work, "helmr.config.mjs"), code, 0o644); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrBuild, err)
	}
	var out struct {
		Config *Config `json:"config"`
	}
	if err := runNode(ctx, opts, work, &out, runner, "--config", "helmr.config.mjs"); err != nil {
		return Config{}, fmt.Errorf("%w: %s: %v", ErrBuild, filepath.Base(cfgPath), err)
	}
	c := out.Config
	if c == nil || c.Project == "" {
		return Config{}, fmt.Errorf("%w: %s: the default export must be defineConfig({ project, dirs })", ErrBuild, filepath.Base(cfgPath))
	}
	if len(c.Dirs) == 0 {
		c.Dirs = []string{"."}
	}
	for _, d := range c.Dirs {
		if !filepath.IsLocal(filepath.Clean(d)) && filepath.Clean(d) != "." {
			return Config{}, fmt.Errorf("%w: %s: dirs entry %q is outside the project", ErrBuild, filepath.Base(cfgPath), d)
		}
	}
	return *c, nil
}

func index(ctx context.Context, work, runner string, files map[string][]byte, opts Options) (deployments.Manifest, error) {
	paths := make([]string, 0, len(files))
	for p, code := range files {
		full := filepath.Join(work, "bundles", p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return deployments.Manifest{}, fmt.Errorf("%w: %v", ErrBuild, err)
		}
		if err := os.WriteFile(full, code, 0o644); err != nil {
			return deployments.Manifest{}, fmt.Errorf("%w: %v", ErrBuild, err)
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var out struct {
		Tasks []deployments.TaskManifest `json:"tasks"`
	}
	args := append([]string{runner, filepath.Join(work, "bundles")}, paths...)
	if err := runNode(ctx, opts, work, &out, args...); err != nil {
		return deployments.Manifest{}, fmt.Errorf("%w: index tasks: %v", ErrBuild, err)
	}
	return deployments.Manifest{Tasks: out.Tasks}, nil
}

// runNode runs the index runner and decodes its one JSON line into out.
func runNode(ctx context.Context, opts Options, dir string, out any, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, opts.Node, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HELMR_INDEX=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var report struct {
		Error *struct {
			Module  string `json:"module"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(stdout.Bytes(), &report) == nil && report.Error != nil {
		return fmt.Errorf("%s: %s", report.Error.Module, report.Error.Message)
	}
	if runErr != nil {
		if errors.Is(runErr, exec.ErrNotFound) {
			return fmt.Errorf("deploying needs Node.js (%q) on this machine's PATH", opts.Node)
		}
		return fmt.Errorf("%v: %s", runErr, lastLines(stderr.String(), 5))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("index runner printed no manifest: %v", err)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// findModules lists task module files (relative, slash-separated) under dirs.
func findModules(root string, dirs []string) ([]string, error) {
	var mods []string
	for _, d := range dirs {
		base := filepath.Join(root, d)
		err := filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() {
				if p != base && (e.Name() == "node_modules" || strings.HasPrefix(e.Name(), ".")) {
					return filepath.SkipDir
				}
				return nil
			}
			if isModule(e.Name()) {
				rel, _ := filepath.Rel(root, p)
				mods = append(mods, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%w: task dir %q: %v", ErrBuild, d, err)
		}
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("%w: no task modules (.ts, .mts, .js, .mjs) under %s", ErrBuild, strings.Join(dirs, ", "))
	}
	sort.Strings(mods)
	return dedupe(mods), nil
}

func isModule(name string) bool {
	if strings.HasSuffix(name, ".d.ts") || strings.Contains(name, ".test.") || strings.Contains(name, ".spec.") {
		return false
	}
	for _, ext := range []string{".ts", ".mts", ".js", ".mjs"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// bundlePath maps a module path to its bundle's path in the deployment.
func bundlePath(m string) string {
	return "bundles/" + strings.TrimSuffix(m, filepath.Ext(m)) + ".mjs"
}
