package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/deployments/build"
	"github.com/helmr/helmr/internal/runs"
)

func (a *App) deployCmd() *cobra.Command {
	var noBuild, noCache bool
	c := &cobra.Command{
		Use:     "deploy PATH",
		Short:   "deploy the task project at PATH as a new version",
		GroupID: "runs",
		Args:    exactly(1, "usage: helmr deploy PATH [--no-build | --no-cache]"),
		RunE: func(c *cobra.Command, args []string) error {
			return a.deploy(c.Context(), args[0], noBuild, noCache, c.Flags().Changed("project"))
		},
	}
	c.Flags().BoolVar(&noBuild, "no-build", false, "do not build the images now: a worker builds a task's image at its first run")
	c.Flags().BoolVar(&noCache, "no-cache", false, "run every image run step again instead of reusing cached layers")
	return a.api(c)
}

// deploy builds the project at dir and uploads it; explicit is whether
// --project was given (it must then match the project's config).
func (a *App) deploy(ctx context.Context, dir string, noBuild, noCache, explicit bool) error {
	if noBuild && noCache {
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
	res, err := build.Build(ctx, dir, build.Options{Node: a.cfg.Node, Progress: progress})
	if err != nil {
		return err
	}
	if explicit && a.cfg.Project != res.Manifest.Project {
		return fmt.Errorf("--project %q does not match the project's config (%q)", a.cfg.Project, res.Manifest.Project)
	}
	progress(fmt.Sprintf("uploading %d file(s)", len(res.Files)))
	d, err := c.CreateDeployment(ctx, a.cfg.Env, res.Manifest, res.Files, client.DeployOptions{Build: !noBuild, NoCache: noCache})
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
