package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/deployments/build"
	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/worker"
)

// runImage is `helmr image build PATH TASK`: the task's image built on
// this machine, as a worker would (the same layer cache as a helmr dev with
// the same data dir), optionally exported.
func runImage(ctx context.Context, a *App, args []string) error {
	if len(args) == 0 || args[0] != "build" {
		return errors.New("usage: helmr image build PATH TASK [--no-cache] [--oci DIR] [--ext4 FILE]")
	}
	fs := newFlagSet(a, "image build")
	noCache := fs.Bool("no-cache", false, "run every run step again")
	oci := fs.String("oci", "", "also write the image as an OCI image layout at DIR")
	ext4 := fs.String("ext4", "", "also write the image's root filesystem as an ext4 image FILE")
	fs.StringVar(&a.cfg.DataDir, "data-dir", a.cfg.DataDir, "data directory holding the layer cache ($HELMR_DATA_DIR)")
	fs.StringVar(&a.cfg.Runtime, "runtime", a.cfg.Runtime, "isolation tier policy for run steps ($HELMR_RUNTIME)")
	pos, err := parse(fs.FlagSet, args[1:])
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return errors.New("usage: helmr image build PATH TASK [--no-cache] [--oci DIR] [--ext4 FILE]")
	}
	if err := a.cfg.Validate(); err != nil {
		return err
	}
	res, err := build.Build(ctx, pos[0], build.Options{Node: a.cfg.Node})
	if err != nil {
		return err
	}
	var task *deployments.TaskManifest
	for i := range res.Manifest.Tasks {
		if res.Manifest.Tasks[i].ID == pos[1] {
			task = &res.Manifest.Tasks[i]
		}
	}
	if task == nil || task.Sandbox == nil {
		var ids []string
		for _, t := range res.Manifest.Tasks {
			ids = append(ids, t.ID)
		}
		return fmt.Errorf("project %s has no task %q with a sandbox (tasks: %s)", res.Manifest.Project, pos[1], strings.Join(ids, ", "))
	}
	log := a.logger()
	rt, err := newRuntime(a.cfg, log)
	if err != nil {
		return err
	}
	nc, err := newNetwork(a.cfg, "", log)
	if err != nil {
		return err
	}
	runner, err := worker.NewStepRunner(rt, nc, a.cfg.ExtraCACerts, a.cfg.DataDir, log)
	if err != nil {
		return err
	}
	r := resolverFor(a.cfg.DataDir, a.cfg.CacheDir)
	r.Runner = runner
	opts := images.PrepareOptions{
		Scope: res.Manifest.Project, NoCache: *noCache,
		Output: func(_ int, _ string, data []byte) { a.Stdout.Write(data) },
	}
	if len(deployments.BuildSecretNames(task.Sandbox.Image)) > 0 {
		// Build secrets come from this machine's vault (the store and master
		// key of a helmr dev with this data dir, or HELMR_MASTER_KEY).
		st, _, err := openStore(ctx, a.cfg, log)
		if err != nil {
			return err
		}
		defer st.Close()
		v, err := openVault(ctx, a.cfg, st, true, log)
		if err != nil {
			return err
		}
		project, env := res.Manifest.Project, a.cfg.Env
		opts.Secret = func(ctx context.Context, name string) ([]byte, error) { return v.Reveal(ctx, project, env, name) }
	}
	start := time.Now()
	img, err := r.Prepare(ctx, task.Sandbox.Image, res.Files, opts)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.Stdout, "image %s %s: %d layers, built in %s\n", task.Sandbox.Image.Name, img.Digest, len(img.Layers), time.Since(start).Round(10*time.Microsecond))
	if *oci != "" {
		if err := images.ExportOCI(img, *oci); err != nil {
			return err
		}
		fmt.Fprintf(a.Stdout, "wrote OCI image layout %s\n", *oci)
	}
	if *ext4 != "" {
		if err := images.WriteExt4(img, *ext4); err != nil {
			return err
		}
		fmt.Fprintf(a.Stdout, "wrote ext4 root filesystem %s\n", *ext4)
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
