package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/deployments/build"
	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/worker"
)

const imageUsage = "usage: helmr image build PATH TASK [--no-cache] [--oci DIR] [--ext4 FILE], or helmr image export PATH TASK DIR [--no-cache] [--ext4 FILE]"

// runImage is `helmr image build PATH TASK` and `helmr image export PATH
// TASK DIR`: the task's image built on this machine, as a worker would
// (the same layer cache as a helmr dev with the same data dir, so an
// unchanged image runs no step), optionally exported; export always
// writes the OCI image layout DIR.
func runImage(ctx context.Context, a *App, args []string) error {
	if len(args) == 0 || (args[0] != "build" && args[0] != "export") {
		return errors.New(imageUsage)
	}
	verb := args[0]
	fs := newFlagSet(a, "image "+verb)
	noCache := fs.Bool("no-cache", false, "run every run step again")
	var oci *string
	if verb == "build" {
		oci = fs.String("oci", "", "also write the image as an OCI image layout at DIR")
	}
	ext4 := fs.String("ext4", "", "also write the image's root filesystem as an ext4 image FILE")
	fs.StringVar(&a.cfg.DataDir, "data-dir", a.cfg.DataDir, "data directory holding the layer cache ($HELMR_DATA_DIR)")
	fs.StringVar(&a.cfg.Runtime, "runtime", a.cfg.Runtime, "isolation tier policy for run steps ($HELMR_RUNTIME)")
	pos, err := parse(fs.FlagSet, args[1:])
	if err != nil {
		return err
	}
	want := map[string]int{"build": 2, "export": 3}[verb]
	if len(pos) != want {
		return errors.New(imageUsage)
	}
	out := imageOutputs{ext4: *ext4}
	if verb == "export" {
		out.oci = pos[2]
	} else {
		out.oci = *oci
	}
	// Refuse before building, not after.
	if err := out.check(); err != nil {
		return err
	}
	if err := a.cfg.Validate(); err != nil {
		return err
	}
	img, err := buildTaskImage(ctx, a, pos[0], pos[1], *noCache)
	if err != nil {
		return err
	}
	return out.write(a, img)
}

// buildTaskImage builds the image of task in the project at dir with this
// machine's layer cache, run-step tier and (for build secrets and registry
// credentials) vault.
func buildTaskImage(ctx context.Context, a *App, dir, taskID string, noCache bool) (images.Image, error) {
	res, err := build.Build(ctx, dir, build.Options{Node: a.cfg.Node})
	if err != nil {
		return images.Image{}, err
	}
	var task *deployments.TaskManifest
	for i := range res.Manifest.Tasks {
		if res.Manifest.Tasks[i].ID == taskID {
			task = &res.Manifest.Tasks[i]
		}
	}
	if task == nil || task.Sandbox == nil {
		var ids []string
		for _, t := range res.Manifest.Tasks {
			ids = append(ids, t.ID)
		}
		return images.Image{}, fmt.Errorf("project %s has no task %q with a sandbox (tasks: %s)", res.Manifest.Project, taskID, strings.Join(ids, ", "))
	}
	log := a.logger()
	// Its own instance: a helmr dev using the same data dir keeps its
	// sandboxes.
	rt, err := newRuntime(a.cfg, log, fmt.Sprintf("cli-%d", os.Getpid()))
	if err != nil {
		return images.Image{}, err
	}
	nc, err := newNetwork(a.cfg, "", log)
	if err != nil {
		return images.Image{}, err
	}
	runner, err := worker.NewStepRunner(rt, nc, a.cfg.ExtraCACerts, a.cfg.DataDir, log)
	if err != nil {
		return images.Image{}, err
	}
	r := resolverFor(a.cfg.DataDir, a.cfg.CacheDir)
	r.Runner = runner
	opts := images.PrepareOptions{
		Scope: res.Manifest.Project, NoCache: noCache,
		Output: func(_ int, _ string, data []byte) { a.Stdout.Write(data) },
	}
	if len(deployments.BuildSecretNames(task.Sandbox.Image)) > 0 {
		// Build secrets and registry credentials come from this machine's
		// vault (the store and master key of a helmr dev with this data
		// dir, or HELMR_MASTER_KEY).
		st, _, err := openStore(ctx, a.cfg, log)
		if err != nil {
			return images.Image{}, err
		}
		defer st.Close()
		v, err := openVault(ctx, a.cfg, st, true, log)
		if err != nil {
			return images.Image{}, err
		}
		project, env := res.Manifest.Project, a.cfg.Env
		opts.Secret = func(ctx context.Context, name string) ([]byte, error) { return v.Reveal(ctx, project, env, name) }
	}
	start := time.Now()
	img, err := r.Prepare(ctx, task.Sandbox.Image, res.Files, opts)
	if err != nil {
		return images.Image{}, err
	}
	fmt.Fprintf(a.Stdout, "image %s %s: %d layers, built in %s\n", task.Sandbox.Image.Name, img.Digest, len(img.Layers), time.Since(start).Round(10*time.Microsecond))
	return img, nil
}

// imageOutputs are where a built image is written: an OCI image layout
// directory and an ext4 root filesystem file, each optional.
type imageOutputs struct{ oci, ext4 string }

// check fails if an output is already there (neither is overwritten).
func (o imageOutputs) check() error {
	for _, p := range []string{o.oci, o.ext4} {
		if p == "" {
			continue
		}
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s already exists: image exports never overwrite", p)
		}
	}
	return nil
}

func (o imageOutputs) write(a *App, img images.Image) error {
	if o.oci != "" {
		if err := images.ExportOCI(img, o.oci); err != nil {
			return err
		}
		fmt.Fprintf(a.Stdout, "wrote OCI image layout %s\n", o.oci)
	}
	if o.ext4 != "" {
		if err := images.WriteExt4(img, o.ext4); err != nil {
			return err
		}
		fmt.Fprintf(a.Stdout, "wrote ext4 root filesystem %s\n", o.ext4)
	}
	return nil
}

// resolverFor is the image resolver of a worker with this data dir.
func resolverFor(dataDir, cacheDir string) *images.Resolver {
	return &images.Resolver{
		BasesDir:  filepath.Join(cacheDir, "bases"),
		LayersDir: filepath.Join(dataDir, "layers"),
		CachesDir: filepath.Join(dataDir, "caches"),
		ImagesDir: filepath.Join(dataDir, "images"),
	}
}
