// Package images turns an image declaration into what a sandbox tier runs:
// a stack of read-only root filesystem layers plus the image's config (env,
// workdir, user). Bases are built-in (scripts/build-base-rootfs.sh),
// registry references (pulled with go-containerregistry, with credentials
// from the vault) or OCI layouts; run steps execute in a sandbox tier, and
// every step's result is cached under the key of its inputs.
package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/deployments"
)

// ErrPreparation wraps every failure to prepare an image for a run: the
// run fails with class image_preparation.
var ErrPreparation = errors.New("image preparation")

// BasePrefix is the reference prefix of built-in base images.
const BasePrefix = "helmr/"

// Image is a prepared image.
type Image struct {
	// Layers are root filesystem directories, lowest first.
	Layers  []string
	Env     []string // KEY=VALUE, in step order
	Workdir string
	User    string
	// Digest identifies the layer stack and config.
	Digest string
	// Base is the from(...) reference, BaseDigest what it resolved to.
	Base, BaseDigest string
}

// Resolver prepares images from built-in bases and a layer cache.
type Resolver struct {
	// BasesDir holds <name>/rootfs and <name>/config.json per built-in base.
	BasesDir string
	// LayersDir caches the layers steps produce, by the key of their
	// inputs (copy: the copied bytes; run: the step and everything before).
	LayersDir string
	// ImagesDir holds OCI image layouts that "oci:<name>" bases name.
	ImagesDir string
	// CachesDir holds the named caches run steps mount, per scope.
	CachesDir string
	// Runner executes run steps; nil: images with run steps fail.
	Runner StepRunner

	pinMu sync.Mutex
	pins  map[string]int   // cache entries a build step runs on (see Collect)
	sizes map[string]int64 // cache entries' disk space, measured once
}

type baseConfig struct {
	Env     map[string]string `json:"env"`
	Workdir string            `json:"workdir"`
	User    string            `json:"user"`
}

// Bases lists the built-in base image references available here.
func (r *Resolver) Bases() []string {
	ents, _ := os.ReadDir(r.BasesDir)
	var out []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(r.BasesDir, e.Name(), "config.json")); err == nil {
			out = append(out, BasePrefix+e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// Prepare resolves img against files (the deployment's files), building
// what its steps make that the layer cache does not hold yet.
func (r *Resolver) Prepare(ctx context.Context, img *deployments.ImageManifest, files map[string][]byte, opts PrepareOptions) (Image, error) {
	if img == nil || len(img.Steps) == 0 || img.Steps[0].Kind != deployments.StepFrom {
		return Image{}, fmt.Errorf("%w: the image declares no from(...) step", ErrPreparation)
	}
	began, runSteps, ran := time.Now(), 0, 0
	out, base, err := r.resolveBase(ctx, img.Steps[0], opts)
	if err != nil {
		return Image{}, err
	}
	key := img.Steps[0].Ref + "@" + base
	out.Base, out.BaseDigest = img.Steps[0].Ref, base
	for i, s := range img.Steps[1:] {
		if err := ctx.Err(); err != nil {
			return Image{}, err
		}
		step, _ := json.Marshal(s)
		key = hashKey(key, string(step))
		switch s.Kind {
		case deployments.StepCopy:
			layer, err := r.copyLayer(key, out, s, files)
			if err != nil {
				return Image{}, fmt.Errorf("%w: step %d (copy to %s): %w", ErrPreparation, i+1, s.Dest, err)
			}
			out.Layers = append(out.Layers, layer)
			key = filepath.Base(layer) // the layer's content key: later steps and the digest follow the bytes
		case deployments.StepRun:
			runSteps++
			layer, err := r.runLayer(ctx, key, i+1, out, s, opts, &ran)
			if err != nil {
				return Image{}, fmt.Errorf("%w: step %d (run %s): %w", ErrPreparation, i+1, quoteArgv(s.Argv), err)
			}
			out.Layers = append(out.Layers, layer)
		case deployments.StepCopyFrom:
			// The source image's build secrets and registry credentials
			// come from the same vault.
			from, err := r.Prepare(ctx, s.Image, files, PrepareOptions{Scope: opts.Scope, NoCache: opts.NoCache, Secret: opts.Secret})
			if err != nil {
				return Image{}, fmt.Errorf("%w: step %d (copyFrom %s): the source image: %w", ErrPreparation, i+1, s.Image.Name, err)
			}
			key = hashKey(key, from.Digest)
			layer, err := r.copyFromLayer(key, out, from, s)
			if err != nil {
				return Image{}, fmt.Errorf("%w: step %d (copyFrom %s %s): %w", ErrPreparation, i+1, s.Image.Name, s.Src, err)
			}
			out.Layers = append(out.Layers, layer)
		case deployments.StepWorkdir:
			out.Workdir = s.Path
		case deployments.StepEnv:
			out.Env = append(out.Env, s.Key+"="+s.Value)
		case deployments.StepUser:
			out.User = s.User
		default:
			return Image{}, fmt.Errorf("%w: step %d: unknown step kind %q", ErrPreparation, i+1, s.Kind)
		}
	}
	out.Digest = "sha256:" + hashKey(key, out.User, out.Workdir, strings.Join(out.Env, "\x00"))
	r.markUsed(out.Layers)
	if runSteps > 0 && opts.Output != nil {
		opts.Output(0, "build", []byte(fmt.Sprintf("image %s ready in %s: %d run steps ran, %d cached\n",
			img.Name, time.Since(began).Round(10*time.Microsecond), ran, runSteps-ran)))
	}
	return out, nil
}

func (r *Resolver) base(ref string) (Image, error) {
	name, ok := strings.CutPrefix(ref, BasePrefix)
	if !ok || name == "" || strings.ContainsAny(name, "/:\\") || name == "." || name == ".." {
		return Image{}, fmt.Errorf("%w: base image %q is not available: this worker has no registry access; built-in bases: %s", ErrPreparation, ref, strings.Join(r.Bases(), ", "))
	}
	dir := filepath.Join(r.BasesDir, name)
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return Image{}, fmt.Errorf("%w: base image %q is not built on this worker (run scripts/build-base-rootfs.sh %s); built-in bases: %s", ErrPreparation, ref, name, strings.Join(r.Bases(), ", "))
	}
	var cfg baseConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return Image{}, fmt.Errorf("%w: base image %q: bad config.json: %v", ErrPreparation, ref, err)
	}
	img := Image{Layers: []string{filepath.Join(dir, "rootfs")}, Workdir: cfg.Workdir, User: cfg.User}
	keys := make([]string, 0, len(cfg.Env))
	for k := range cfg.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		img.Env = append(img.Env, k+"="+cfg.Env[k])
	}
	return img, nil
}

// copyLayer materializes a copy step as a layer directory, once per key.
func (r *Resolver) copyLayer(key string, img Image, s deployments.Step, files map[string][]byte) (string, error) {
	src := path.Clean(s.Source.Path)
	uid, gid := uint32(0), uint32(0)
	if s.Owner != "" {
		var err error
		if uid, gid, _, err = (Image{Layers: img.Layers, User: s.Owner}).ResolveUser(); err != nil {
			return "", fmt.Errorf("owner: %w", err)
		}
	}
	executable := map[string]bool{}
	for _, e := range s.Source.Executables {
		executable[e] = true
	}
	var entries []string
	for p := range files {
		if rel, ok := strings.CutPrefix(p, "context/"); ok && (rel == src || src == "." || strings.HasPrefix(rel, src+"/")) {
			entries = append(entries, rel)
		}
	}
	if len(entries) == 0 {
		return "", fmt.Errorf("source %q has no files in the deployment", s.Source.Path)
	}
	sort.Strings(entries)
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d:%d", key, uid, gid)
	for _, e := range entries {
		fmt.Fprintf(h, "\x00%s\x00%x\x00%v", e, sha256.Sum256(files["context/"+e]), executable[e])
	}
	dir := filepath.Join(r.LayersDir, hex.EncodeToString(h.Sum(nil)))
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(r.LayersDir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(r.LayersDir, ".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, e := range entries {
		dest := s.Dest
		if s.Source.Type == "directory" {
			rel := strings.TrimPrefix(strings.TrimPrefix(e, src), "/")
			if src == "." {
				rel = e
			}
			dest = path.Join(s.Dest, rel)
		} else if strings.HasSuffix(s.Dest, "/") {
			dest = path.Join(s.Dest, path.Base(e))
		}
		full := filepath.Join(tmp, filepath.FromSlash(dest))
		if err := layerDirs(tmp, img, path.Dir(dest), uid, gid); err != nil {
			return "", err
		}
		mode := os.FileMode(0o644)
		if executable[e] {
			mode = 0o755
		}
		if s.Mode != nil {
			mode = os.FileMode(*s.Mode)
		}
		if err := os.WriteFile(full, files["context/"+e], 0o600); err != nil {
			return "", err
		}
		if err := os.Chown(full, int(uid), int(gid)); err != nil {
			return "", err
		}
		if err := os.Chmod(full, mode); err != nil {
			return "", err
		}
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, statErr := os.Stat(dir); statErr != nil {
			return "", err
		}
	}
	return dir, nil
}

// quoteArgv shows an argv as a shell would read it, shortened.
func quoteArgv(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		if a == "" || strings.ContainsAny(a, " \t\n'\"$\\") {
			b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
		} else {
			b.WriteString(a)
		}
	}
	if s := b.String(); len(s) > 120 {
		return s[:117] + "..."
	}
	return b.String()
}

func hashKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}
