package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/deployments/build"
	"github.com/helmr/helmr/internal/runs"
)

func runDeploy(ctx context.Context, a *App, args []string) error {
	fs := a.flags("deploy")
	noBuild := fs.Bool("no-build", false, "do not build the images now: a worker builds a task's image at its first run")
	noCache := fs.Bool("no-cache", false, "run every image run step again instead of reusing cached layers")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: helmr deploy PATH [--no-build | --no-cache]")
	}
	if *noBuild && *noCache {
		return errors.New("--no-cache applies to the build at deploy, which --no-build skips: pass one of them")
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	start := time.Now()
	progress := func(msg string) {
		if !a.json {
			fmt.Fprintln(a.Stderr, "  "+msg)
		}
	}
	res, err := build.Build(ctx, pos[0], build.Options{Node: a.cfg.Node, Progress: progress})
	if err != nil {
		return err
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "project" })
	if explicit && a.cfg.Project != res.Manifest.Project {
		return fmt.Errorf("--project %q does not match the project's config (%q)", a.cfg.Project, res.Manifest.Project)
	}
	progress(fmt.Sprintf("uploading %d file(s)", len(res.Files)))
	d, err := c.CreateDeployment(ctx, a.cfg.Env, res.Manifest, res.Files, client.DeployOptions{Build: !*noBuild, NoCache: *noCache})
	if err != nil {
		return fmt.Errorf("deployment_build: %w", err)
	}
	a.rememberProject(d.Project)
	if d.BuildRunID != "" {
		fmt.Fprintf(a.Stderr, "  building images on a worker (build run %s)\n", d.BuildRunID)
		if d, err = a.awaitBuild(ctx, c, d); err != nil {
			return err
		}
	}
	if a.json {
		if err := a.printJSON(d); err != nil {
			return err
		}
	} else {
		verb := "deployed"
		if d.Status == deployments.StatusFailed {
			verb = "failed to deploy"
		}
		fmt.Fprintf(a.Stdout, "%s %s/%s version %d (%s) in %s\n", verb, d.Project, d.Env, d.Version, d.ID, time.Since(start).Round(time.Millisecond))
		for _, t := range d.Manifest.Tasks {
			if img, ok := d.Images[t.ID]; ok {
				fmt.Fprintf(a.Stdout, "  task %s (image %s %s)\n", t.ID, img.Name, img.Digest)
			} else {
				fmt.Fprintf(a.Stdout, "  task %s\n", t.ID)
			}
		}
	}
	if d.Status == deployments.StatusFailed {
		fmt.Fprintf(a.Stderr, "helmr: deployment_build: %s\n", d.BuildError)
		fmt.Fprintf(a.Stderr, "helmr: the previous version stays current; the build's log: helmr logs %s\n", d.BuildRunID)
		return exitError{code: 1}
	}
	return nil
}

// awaitBuild prints the build run's progress (each step's output as it
// comes) on stderr, also with --json, until it ends, and returns the
// deployment as it ended up. Interrupting stops the printing, not the
// build.
func (a *App) awaitBuild(ctx context.Context, c *client.Client, d deployments.Deployment) (deployments.Deployment, error) {
	err := c.Follow(ctx, d.BuildRunID, 0, func(ev runs.Event) error {
		switch ev.Type {
		case runs.EventLog:
			var l runs.LogData
			_ = json.Unmarshal(ev.Data, &l)
			fmt.Fprintln(a.Stderr, "  │ "+l.Line)
		case runs.EventSystem:
			var s runs.SystemData
			_ = json.Unmarshal(ev.Data, &s)
			fmt.Fprintln(a.Stderr, "  "+s.Message)
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(a.Stderr, "helmr: stopped following; the build goes on: helmr logs -f %s\n", d.BuildRunID)
		}
		return d, err
	}
	return c.GetDeployment(ctx, d.ID)
}
