package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/deployments"
	sdkts "github.com/helmr/helmr/sdk/typescript"
)

// initTemplates are the files `helmr init` writes, as text/templates of
// initVars: a name's ".tmpl" suffix is dropped, and "helmrignore" and
// "gitignore" get their leading dot.
//
//go:embed inittemplate
var initTemplates embed.FS

// vendorDir is where `helmr init` copies the SDK's tarball in a project.
const vendorDir = "vendor"

// initVars fill the templates.
type initVars struct {
	Project    string // the project's name in helmr.config.ts
	Package    string // package.json's name
	SDK        string // the @helmr/sdk dependency: "file:..."
	Vendored   string // .helmrignore line for a vendored tarball, if any
	TypeScript string // the pins of the SDK's own dev tools
	TypesNode  string
}

func (a *App) initCmd() *cobra.Command {
	var project, sdk string
	c := &cobra.Command{
		Use:   "init [DIR]",
		Short: "scaffold a task project in DIR (default: the current directory)",
		Long: `helmr init writes a task project into DIR, which must be empty but for dotfiles (.git is fine): helmr.config.ts, tasks/hello.ts, tsconfig.json, package.json, .helmrignore and .gitignore.

package.json depends on @helmr/sdk from a file npm installs without a registry: by default the SDK's tarball next to the helmr binary (bin/helmr-sdk-VERSION.tgz, which make build and scripts/sdk-pack.sh write), copied into DIR/vendor; --sdk names another tarball (copied too) or the SDK's directory (sdk/typescript of a Helmr checkout, built with npm run build; linked).`,
		GroupID: "runs",
		Args:    nargs("usage: helmr init [DIR] [--project NAME] [--sdk PATH]", func(n int) bool { return n <= 1 }),
		RunE: func(c *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			return a.initProject(dir, project, sdk)
		},
	}
	c.Flags().StringVar(&project, "project", "", "the project's name (default: DIR's name, made valid)")
	c.Flags().StringVar(&sdk, "sdk", "", "the @helmr/sdk package: its .tgz (copied into DIR/vendor) or its directory (default: the tarball next to helmr)")
	return a.withJSON(c)
}

// initResult is what helmr init --json prints.
type initResult struct {
	Project string   `json:"project"`
	Dir     string   `json:"dir"`
	SDK     string   `json:"sdk"`   // package.json's @helmr/sdk dependency
	Files   []string `json:"files"` // written
	Kept    []string `json:"kept"`  // there already, left as they were
}

// initProject scaffolds a task project in dir.
func (a *App) initProject(dir, project, sdk string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := checkInitDir(abs); err != nil {
		return err
	}
	if project == "" {
		project = projectName(filepath.Base(abs))
	} else if !deployments.ValidName(project) {
		return fmt.Errorf("--project %q: a project name is 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", project)
	}
	pkg, err := sdkPackage()
	if err != nil {
		return err
	}
	src, err := findSDK(sdk, pkg)
	if err != nil {
		return err
	}
	vars := initVars{Project: project, Package: npmName(project),
		TypeScript: pkg.DevDependencies["typescript"], TypesNode: pkg.DevDependencies["@types/node"]}
	if vars.TypeScript == "" || vars.TypesNode == "" {
		return errors.New("the embedded @helmr/sdk package.json pins no typescript or @types/node (a broken build)")
	}
	if src.tarball != "" {
		if err := sameSDK(src.tarball); err != nil {
			fmt.Fprintf(a.Stderr, "helmr: warning: %s: %v: the editor would check against another SDK than helmr deploy bundles (rebuild it with scripts/sdk-pack.sh)\n", src.tarball, err)
		}
	}
	files, err := renderInit(vars, src, abs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	wrote, kept := []string{}, []string{}
	for _, f := range files {
		ok, err := f.write(abs)
		if err != nil {
			return err
		}
		if ok {
			wrote = append(wrote, f.name)
		} else {
			kept = append(kept, f.name)
		}
	}
	if a.json {
		return a.printJSON(initResult{Project: project, Dir: abs, SDK: sdkDependency(files), Files: wrote, Kept: kept})
	}
	a.printInitNext(dir, project, wrote, kept)
	return nil
}

// checkInitDir refuses a directory holding anything but dotfiles (a
// missing one is fine: init creates it).
func checkInitDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	var taken []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") {
			taken = append(taken, e.Name())
		}
	}
	if len(taken) > 0 {
		if len(taken) > 3 {
			taken = append(taken[:3], "...")
		}
		return fmt.Errorf("%s is not empty (it holds %s): helmr init scaffolds into an empty directory (dotfiles such as .git may be there); pass a new DIR", dir, strings.Join(taken, ", "))
	}
	return nil
}

var invalidNameRun = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// projectName makes a directory's name a valid project name.
func projectName(base string) string {
	name := strings.TrimLeft(invalidNameRun.ReplaceAllString(base, "-"), "-_.")
	if len(name) > 128 {
		name = name[:128]
	}
	if !deployments.ValidName(name) {
		return "tasks"
	}
	return name
}

// npmName is a project's name as package.json's: lower case, no leading
// dot or underscore.
func npmName(project string) string {
	name := strings.TrimLeft(strings.ToLower(project), "._")
	if name == "" {
		return "tasks"
	}
	return name
}

// sdkManifest is the part of @helmr/sdk's package.json init reads.
type sdkManifest struct {
	Name            string            `json:"name"`
	Version         string            `json:"version"`
	DevDependencies map[string]string `json:"devDependencies"`
}

// sdkPackage is the package.json of the SDK this binary embeds.
func sdkPackage() (sdkManifest, error) {
	var m sdkManifest
	if err := json.Unmarshal(sdkts.PackageJSON, &m); err != nil || m.Name != "@helmr/sdk" || m.Version == "" {
		return m, fmt.Errorf("the embedded @helmr/sdk package.json does not parse (%v)", err)
	}
	return m, nil
}

// tarballName is the file npm pack names the SDK's package.
func (m sdkManifest) tarballName() string {
	return strings.ReplaceAll(strings.TrimPrefix(m.Name, "@"), "/", "-") + "-" + m.Version + ".tgz"
}

// sdkSource is where a project's @helmr/sdk comes from: a tarball to copy
// into the project, or a directory to link.
type sdkSource struct {
	tarball string
	dir     string
}

// findSDK resolves --sdk, or without it the tarball next to the binary.
func findSDK(flag string, pkg sdkManifest) (sdkSource, error) {
	if flag == "" {
		exe, err := os.Executable()
		if err != nil {
			return sdkSource{}, fmt.Errorf("locate the helmr binary: %w", err)
		}
		if exe, err = filepath.EvalSymlinks(exe); err != nil {
			return sdkSource{}, fmt.Errorf("locate the helmr binary: %w", err)
		}
		p := filepath.Join(filepath.Dir(exe), pkg.tarballName())
		if _, err := os.Stat(p); err != nil {
			return sdkSource{}, fmt.Errorf("no @helmr/sdk package next to helmr (%s): build it with scripts/sdk-pack.sh %s (make build does), or pass --sdk PATH (an @helmr/sdk tarball or directory)", p, filepath.Dir(exe))
		}
		return sdkSource{tarball: p}, nil
	}
	p, err := filepath.Abs(flag)
	if err != nil {
		return sdkSource{}, err
	}
	st, err := os.Stat(p)
	if err != nil {
		return sdkSource{}, fmt.Errorf("--sdk: %w", err)
	}
	if !st.IsDir() {
		if !strings.HasSuffix(p, ".tgz") && !strings.HasSuffix(p, ".tar.gz") {
			return sdkSource{}, fmt.Errorf("--sdk %s: want an npm package tarball (.tgz, from npm pack) or the SDK's directory", flag)
		}
		return sdkSource{tarball: p}, nil
	}
	var m sdkManifest
	data, err := os.ReadFile(filepath.Join(p, "package.json"))
	if err == nil {
		err = json.Unmarshal(data, &m)
	}
	if err != nil || m.Name != "@helmr/sdk" {
		return sdkSource{}, fmt.Errorf("--sdk %s: not the @helmr/sdk package's directory (its package.json: %v, name %q)", flag, err, m.Name)
	}
	if _, err := os.Stat(filepath.Join(p, "dist", "index.d.ts")); err != nil {
		return sdkSource{}, fmt.Errorf("--sdk %s: the SDK is not built (no dist/index.d.ts): run npm run build there first", flag)
	}
	return sdkSource{dir: p}, nil
}

// sameSDK checks that tarball packs the SDK sources this binary embeds
// (and deploys with): each of its package/src files, and no other.
func sameSDK(tarball string) error {
	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("not an npm package tarball: %w", err)
	}
	packed := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("not an npm package tarball: %w", err)
		}
		if name, ok := strings.CutPrefix(h.Name, "package/"); ok && strings.HasPrefix(name, "src/") && h.Typeflag == tar.TypeReg {
			if packed[name], err = io.ReadAll(io.LimitReader(tr, 16<<20)); err != nil {
				return err
			}
		}
	}
	n := 0
	err = fs.WalkDir(sdkts.FS, "src", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		want, err := fs.ReadFile(sdkts.FS, p)
		if err != nil {
			return err
		}
		if got, ok := packed[p]; !ok || !bytes.Equal(got, want) {
			return fmt.Errorf("its %s differs from this helmr's", p)
		}
		return nil
	})
	if err == nil && n != len(packed) {
		err = fmt.Errorf("it holds %d source files, this helmr's SDK %d", len(packed), n)
	}
	return err
}

// initFile is one file init writes.
type initFile struct {
	name string // slash-separated, relative to the project
	data []byte
	from string // copy this file instead of data
}

// write creates f under dir unless a file of that name is there already
// (a dotfile the directory held): it reports whether it wrote.
func (f initFile) write(dir string) (bool, error) {
	p := filepath.Join(dir, filepath.FromSlash(f.name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return false, err
	}
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var in io.Reader = bytes.NewReader(f.data)
	if f.from != "" {
		src, err := os.Open(f.from)
		if err != nil {
			out.Close()
			return false, err
		}
		defer src.Close()
		in = src
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return false, fmt.Errorf("write %s: %w", p, err)
	}
	return true, out.Close()
}

// renderInit is the project's files for vars and the SDK from src, whose
// dependency (and vendored copy) it fills in.
func renderInit(vars initVars, src sdkSource, dir string) ([]initFile, error) {
	var files []initFile
	if src.tarball != "" {
		name := path.Join(vendorDir, filepath.Base(src.tarball))
		vars.SDK = "file:" + name
		vars.Vendored = vendorDir + "/helmr-sdk-*.tgz"
		files = append(files, initFile{name: name, from: src.tarball})
	} else {
		rel, err := filepath.Rel(dir, src.dir)
		if err != nil {
			rel = src.dir
		}
		vars.SDK = "file:" + filepath.ToSlash(rel)
	}
	funcs := template.FuncMap{"json": func(s string) (string, error) {
		b, err := json.Marshal(s)
		return string(b), err
	}}
	err := fs.WalkDir(initTemplates, "inittemplate", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		text, err := fs.ReadFile(initTemplates, p)
		if err != nil {
			return err
		}
		t, err := template.New(p).Funcs(funcs).Option("missingkey=error").Parse(string(text))
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if err := t.Execute(&b, vars); err != nil {
			return err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(p, "inittemplate/"), ".tmpl")
		if name == "helmrignore" || name == "gitignore" {
			name = "." + name
		}
		files = append(files, initFile{name: name, data: b.Bytes()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("render the project's templates: %w", err)
	}
	slices.SortFunc(files, func(x, y initFile) int { return strings.Compare(x.name, y.name) })
	return files, nil
}

// sdkDependency is the @helmr/sdk dependency package.json got.
func sdkDependency(files []initFile) string {
	for _, f := range files {
		if f.name == "package.json" {
			var pkg struct {
				Dependencies map[string]string `json:"dependencies"`
			}
			_ = json.Unmarshal(f.data, &pkg)
			return pkg.Dependencies["@helmr/sdk"]
		}
	}
	return ""
}

// printInitNext says what init wrote and the commands that come next.
func (a *App) printInitNext(dir, project string, wrote, kept []string) {
	fmt.Fprintf(a.Stdout, "Created task project %q in %s:\n", project, dir)
	for _, f := range wrote {
		fmt.Fprintln(a.Stdout, "  "+f)
	}
	for _, f := range kept {
		fmt.Fprintf(a.Stdout, "  %s (kept the one there)\n", f)
	}
	cd := ""
	if filepath.Clean(dir) != "." {
		cd = fmt.Sprintf("  cd %s\n", shellQuote(dir))
	}
	fmt.Fprintf(a.Stdout, `
Next:
%s  npm install          # @helmr/sdk and TypeScript, for your editor
  npx tsc --noEmit     # type-check the project
  helmr dev --watch .  # Helmr in one process; deploys the project and again on every save
  helmr run hello --payload-json '{"name":"Ada"}' --wait   # in another terminal

Or against a running Helmr: helmr deploy . then helmr run hello.
`, cd)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if regexp.MustCompile(`^[A-Za-z0-9_./-]+$`).MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
