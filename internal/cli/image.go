package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/deployments/build"
	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/worker"
)

const imageUsage = "usage: helmr image build PATH TASK [--no-cache] [--oci DIR] [--ext4 FILE], or helmr image export PATH TASK DIR [--no-cache] [--ext4 FILE]"

// imageCmd is `helmr image build PATH TASK` and `helmr image export PATH
// TASK DIR`: the task's image built on this machine, as a worker would
// (the same layer cache as a helmr dev with the same data dir, so an
// unchanged image runs no step), optionally exported; export always
// writes the OCI image layout DIR.
func (a *App) imageCmd() *cobra.Command {
	var noCache bool
	var out imageOutputs
	build := &cobra.Command{
		Use:   "build PATH TASK",
		Short: "build a task's image here (--oci DIR, --ext4 FILE: also write it out)",
		Args:  exactly(2, imageUsage),
		RunE: func(c *cobra.Command, args []string) error {
			return a.buildImage(c.Context(), args[0], args[1], noCache, out)
		},
	}
	build.Flags().StringVar(&out.oci, "oci", "", "also write the image as an OCI image layout at DIR")
	export := &cobra.Command{
		Use:   "export PATH TASK DIR",
		Short: "build a task's image here and write it as an OCI image layout DIR (--ext4 FILE: also a root filesystem)",
		Args:  exactly(3, imageUsage),
		RunE: func(c *cobra.Command, args []string) error {
			out.oci = args[2]
			return a.buildImage(c.Context(), args[0], args[1], noCache, out)
		},
	}
	for _, c := range []*cobra.Command{build, export} {
		c.Flags().BoolVar(&noCache, "no-cache", false, "run every run step again")
		c.Flags().StringVar(&out.ext4, "ext4", "", "also write the image's root filesystem as an ext4 image FILE")
		a.withJSON(c)
	}
	return parent(&cobra.Command{
		Use:     "image COMMAND",
		Short:   "build a task's image on this machine, and export it (OCI layout, ext4)",
		GroupID: "workspaces",
	}, imageUsage, build, export)
}

// imageResult is what helmr image build --json prints.
type imageResult struct {
	Task   string `json:"task"`
	Image  string `json:"image"`
	Digest string `json:"digest"`
	Layers int    `json:"layers"`
	OCI    string `json:"oci,omitempty"`
	Ext4   string `json:"ext4,omitempty"`
}

func (a *App) buildImage(ctx context.Context, dir, task string, noCache bool, out imageOutputs) error {
	// Refuse before building, not after.
	if err := out.check(); err != nil {
		return err
	}
	if err := a.cfg.Validate(); err != nil {
		return err
	}
	img, name, err := buildTaskImage(ctx, a, dir, task, noCache)
	if err != nil {
		return err
	}
	if err := out.write(a, img); err != nil {
		return err
	}
	if a.json {
		return a.printJSON(imageResult{Task: task, Image: name, Digest: img.Digest, Layers: len(img.Layers), OCI: out.oci, Ext4: out.ext4})
	}
	return nil
}

// progress is where image builds print their steps' output: stdout, or
// stderr when stdout is for JSON.
func (a *App) progress() io.Writer {
	if a.json {
		return a.Stderr
	}
	return a.Stdout
}

// buildTaskImage builds the image of task in the project at dir with this
// machine's layer cache, run-step tier and (for build secrets and registry
// credentials) vault.
func buildTaskImage(ctx context.Context, a *App, dir, taskID string, noCache bool) (images.Image, string, error) {
	res, err := build.Build(ctx, dir, build.Options{Node: a.cfg.Node})
	if err != nil {
		return images.Image{}, "", err
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
		return images.Image{}, "", fmt.Errorf("project %s has no task %q with a sandbox (tasks: %s)", res.Manifest.Project, taskID, strings.Join(ids, ", "))
	}
	log := a.logger()
	// Its own instance: a helmr dev using the same data dir keeps its
	// sandboxes.
	instance := fmt.Sprintf("cli-%d", os.Getpid())
	rt, tier, err := newRuntime(a.cfg, log, instance)
	if err != nil {
		return images.Image{}, "", err
	}
	buildRT, err := newBuildRuntime(a.cfg, log, instance, tier)
	if err != nil {
		return images.Image{}, "", err
	}
	nc, err := newNetwork(a.cfg, "", log)
	if err != nil {
		return images.Image{}, "", err
	}
	runner, err := worker.NewStepRunner(rt, buildRT, nc, a.cfg.ExtraCACerts, a.cfg.DataDir, log)
	if err != nil {
		return images.Image{}, "", err
	}
	r := resolverFor(a.cfg.DataDir, a.cfg.CacheDir)
	r.Runner = runner
	opts := images.PrepareOptions{
		Scope: res.Manifest.Project, NoCache: noCache,
		Output: func(_ int, _ string, data []byte) { a.progress().Write(data) },
	}
	if len(deployments.BuildSecretNames(task.Sandbox.Image)) > 0 {
		// Build secrets and registry credentials come from this machine's
		// vault (the store and master key of a helmr dev with this data
		// dir, or HELMR_MASTER_KEY).
		st, _, err := openStore(ctx, a.cfg, log)
		if err != nil {
			return images.Image{}, "", err
		}
		defer st.Close()
		v, err := openVault(ctx, a.cfg, st, true, log)
		if err != nil {
			return images.Image{}, "", err
		}
		project, env := res.Manifest.Project, a.cfg.Env
		opts.Secret = func(ctx context.Context, name string) (images.SecretValue, error) {
			val, err := v.Open(ctx, project, env, name)
			return images.SecretValue{Value: val.Bytes, Egress: val.Egress}, err
		}
	}
	start := time.Now()
	img, err := r.Prepare(ctx, task.Sandbox.Image, res.Files, opts)
	if err != nil {
		return images.Image{}, "", err
	}
	fmt.Fprintf(a.progress(), "image %s %s: %d layers, built in %s\n", task.Sandbox.Image.Name, img.Digest, len(img.Layers), time.Since(start).Round(10*time.Microsecond))
	return img, task.Sandbox.Image.Name, nil
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
		fmt.Fprintf(a.progress(), "wrote OCI image layout %s\n", o.oci)
	}
	if o.ext4 != "" {
		if err := images.WriteExt4(img, o.ext4); err != nil {
			return err
		}
		fmt.Fprintf(a.progress(), "wrote ext4 root filesystem %s\n", o.ext4)
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
