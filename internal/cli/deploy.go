package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/deployments/build"
)

func runDeploy(ctx context.Context, a *App, args []string) error {
	fs := a.flags("deploy")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: helmr deploy PATH")
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
	d, err := c.CreateDeployment(ctx, a.cfg.Env, res.Manifest, res.Files)
	if err != nil {
		return fmt.Errorf("deployment_build: %w", err)
	}
	a.rememberProject(d.Project)
	if a.json {
		return a.printJSON(d)
	}
	fmt.Fprintf(a.Stdout, "deployed %s/%s version %d (%s) in %s\n", d.Project, d.Env, d.Version, d.ID, time.Since(start).Round(time.Millisecond))
	for _, t := range d.Manifest.Tasks {
		fmt.Fprintf(a.Stdout, "  task %s\n", t.ID)
	}
	return nil
}
