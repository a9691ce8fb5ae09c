// Package tsbundle bundles TypeScript with esbuild's Go API: task modules of
// a user's project (with @helmr/sdk resolved to the SDK embedded in this
// binary) and Helmr's own guest adapter and index runner.
package tsbundle

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/evanw/esbuild/pkg/api"

	runtimets "github.com/helmr/helmr/runtime/typescript"
	sdkts "github.com/helmr/helmr/sdk/typescript"
)

// Target is the oldest Node.js the bundles must run on (the host's node runs
// the index runner at deploy time).
const Target = api.ES2022

// esmRequireBanner lets bundled CommonJS dependencies call require() from
// inside an ES module.
const esmRequireBanner = `import { createRequire as __helmrCreateRequire } from "node:module"; const require = __helmrCreateRequire(import.meta.url);`

// ErrBuild wraps every bundling failure.
var ErrBuild = errors.New("bundle failed")

// TaskModule bundles one task module of a project (absolute entry path)
// into a single ES module.
func TaskModule(projectDir, entry string) ([]byte, error) {
	return build(api.BuildOptions{
		EntryPoints:   []string{entry},
		AbsWorkingDir: projectDir,
	})
}

// Adapter returns the guest adapter bundle (run inside the sandbox with the
// image's node).
func Adapter() ([]byte, error) { return adapter.get("src/adapter.ts") }

// IndexRunner returns the index runner bundle (run with the host's node at
// deploy time to read the manifest).
func IndexRunner() ([]byte, error) { return indexRunner.get("src/index-runner.ts") }

var adapter, indexRunner cachedBundle

type cachedBundle struct {
	once sync.Once
	code []byte
	err  error
}

func (c *cachedBundle) get(entry string) ([]byte, error) {
	c.once.Do(func() {
		c.code, c.err = build(api.BuildOptions{
			EntryPoints: []string{"helmr-runtime:" + entry},
		})
	})
	return c.code, c.err
}

func build(opts api.BuildOptions) ([]byte, error) {
	opts.Bundle = true
	opts.Write = false
	opts.Format = api.FormatESModule
	opts.Platform = api.PlatformNode
	opts.Target = Target
	opts.Outfile = "out.mjs"
	opts.LogLevel = api.LogLevelSilent
	opts.Banner = map[string]string{"js": esmRequireBanner}
	opts.Plugins = append(opts.Plugins, embedPlugin("helmr-sdk", sdkts.FS, sdkAliases),
		embedPlugin("helmr-runtime", runtimets.FS, nil))
	res := api.Build(opts)
	if len(res.Errors) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrBuild, formatMessages(res.Errors))
	}
	for _, f := range res.OutputFiles {
		if strings.HasSuffix(f.Path, ".mjs") {
			return f.Contents, nil
		}
	}
	return nil, fmt.Errorf("%w: esbuild produced no output", ErrBuild)
}

func formatMessages(msgs []api.Message) string {
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteString("; ")
		}
		if m.Location != nil {
			fmt.Fprintf(&b, "%s:%d:%d: ", m.Location.File, m.Location.Line, m.Location.Column+1)
		}
		b.WriteString(m.Text)
	}
	return b.String()
}

// sdkAliases are @helmr/sdk's entry points (its package.json exports) in
// the embedded sources: a project's task modules get this binary's SDK,
// whatever copy its node_modules holds.
var sdkAliases = map[string]string{
	"@helmr/sdk":          sdkts.Entry,
	"@helmr/sdk/client":   sdkts.ClientEntry,
	"@helmr/sdk/manifest": sdkts.ManifestEntry,
}

// embedPlugin serves imports from an embedded FS under its own namespace:
// "<ns>:<path>" entry points, bare module names (aliases, to a path in
// fsys), and relative imports between its files.
func embedPlugin(ns string, fsys fs.FS, aliases map[string]string) api.Plugin {
	return api.Plugin{Name: ns, Setup: func(b api.PluginBuild) {
		for alias, aliasPath := range aliases {
			b.OnResolve(api.OnResolveOptions{Filter: "^" + regexpQuote(alias) + "$"},
				func(api.OnResolveArgs) (api.OnResolveResult, error) {
					return api.OnResolveResult{Path: aliasPath, Namespace: ns}, nil
				})
		}
		b.OnResolve(api.OnResolveOptions{Filter: "^" + ns + ":"},
			func(a api.OnResolveArgs) (api.OnResolveResult, error) {
				return api.OnResolveResult{Path: strings.TrimPrefix(a.Path, ns+":"), Namespace: ns}, nil
			})
		b.OnResolve(api.OnResolveOptions{Filter: `^\.\.?/`, Namespace: ns},
			func(a api.OnResolveArgs) (api.OnResolveResult, error) {
				p, err := resolveIn(fsys, path.Join(path.Dir(a.Importer), a.Path))
				return api.OnResolveResult{Path: p, Namespace: ns}, err
			})
		b.OnLoad(api.OnLoadOptions{Filter: ".*", Namespace: ns},
			func(a api.OnLoadArgs) (api.OnLoadResult, error) {
				data, err := fs.ReadFile(fsys, a.Path)
				if err != nil {
					return api.OnLoadResult{}, err
				}
				s := string(data)
				return api.OnLoadResult{Contents: &s, Loader: api.LoaderTS, ResolveDir: ""}, nil
			})
	}}
}

// resolveIn finds the TypeScript file an extension-less or ".js" import
// names inside fsys.
func resolveIn(fsys fs.FS, p string) (string, error) {
	base := strings.TrimSuffix(strings.TrimSuffix(p, ".js"), ".mjs")
	for _, c := range []string{p, base + ".ts", base + ".mts", base + "/index.ts"} {
		if st, err := fs.Stat(fsys, c); err == nil && !st.IsDir() {
			return c, nil
		}
	}
	return "", fmt.Errorf("cannot resolve %q in embedded sources", p)
}

func regexpQuote(s string) string {
	r := strings.NewReplacer(".", `\.`, "/", `\/`, "@", `@`)
	return r.Replace(s)
}
