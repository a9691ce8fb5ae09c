package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"
)

// runWorkspace is `helmr workspace list|show|delete`.
func runWorkspace(ctx context.Context, a *App, args []string) error {
	const usage = "usage: helmr workspace list | show ID | delete ID"
	if len(args) == 0 {
		return errors.New(usage)
	}
	fs := a.flags("workspace " + args[0])
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	switch {
	case args[0] == "list" && len(pos) == 0:
		if err := a.requireProject(); err != nil {
			return err
		}
		list, err := c.ListWorkspaces(ctx, a.cfg.Project, a.cfg.Env)
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(list)
		}
		tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTASK\tHOST\tLAST RUN\tUSED")
		for _, w := range list {
			used := "never"
			if w.UsedAt != nil {
				used = w.UsedAt.Local().Format(time.DateTime)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", w.ID, w.TaskID, orDash(w.Host), orDash(w.LastRunID), used)
		}
		return tw.Flush()
	case args[0] == "show" && len(pos) == 1:
		w, err := c.GetWorkspace(ctx, pos[0])
		if err != nil {
			return err
		}
		return a.printJSON(w)
	case args[0] == "delete" && len(pos) == 1:
		if err := c.DeleteWorkspace(ctx, pos[0]); err != nil {
			return err
		}
		if !a.json {
			fmt.Fprintf(a.Stdout, "deleted workspace %s (its worker removes its files)\n", pos[0])
		}
		return nil
	}
	return errors.New(usage)
}
