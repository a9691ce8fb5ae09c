package cli

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/workspaces"
)

const workspaceUsage = "usage: helmr workspace create [--quota SIZE] TASK | create [--quota SIZE] --sandbox NAME | list | show ID | delete ID | cp SRC DST (one side WS:PATH, the other a local file, directory or -)"

// workspaceCmd makes, lists, shows, deletes and copies files into and out
// of workspaces.
func (a *App) workspaceCmd() *cobra.Command {
	var req workspaces.CreateRequest
	create := &cobra.Command{
		Use:   "create [TASK]",
		Short: "make a workspace for a task, or for a sandbox (--sandbox NAME)",
		Args:  nargs(workspaceUsage, func(n int) bool { return n <= 1 }),
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 == (req.Sandbox != "") {
				return errors.New(workspaceUsage)
			}
			req.Task = ""
			if len(args) == 1 {
				req.Task = args[0]
			}
			return a.createWorkspace(c.Context(), req)
		},
	}
	create.Flags().StringVar(&req.Sandbox, "sandbox", "", "make the workspace for the deployed sandbox with this name (sandbox(\"NAME\") in the task code) instead of a task's")
	create.Flags().StringVar(&req.Quota, "quota", "", "the workspace's size quota (\"512Mi\", \"20Gi\"; 8Mi to 16Ti); default: the worker's HELMR_WORKSPACE_QUOTA")
	return parent(&cobra.Command{
		Use:     "workspace COMMAND",
		Short:   "make, list, show, delete workspaces, and copy files in and out",
		Long:    "Workspaces keep files between the runs attached to them (helmr run --workspace ID).",
		GroupID: "workspaces",
	}, workspaceUsage, a.api(create),
		a.api(&cobra.Command{Use: "list", Short: "list the project's workspaces", Args: exactly(0, workspaceUsage),
			RunE: func(c *cobra.Command, _ []string) error { return a.listWorkspaces(c.Context()) }}),
		a.api(&cobra.Command{Use: "show ID", Short: "show a workspace (JSON)", Args: exactly(1, workspaceUsage),
			RunE: func(c *cobra.Command, args []string) error { return a.showWorkspace(c.Context(), args[0]) }}),
		a.api(&cobra.Command{Use: "delete ID", Short: "delete a workspace (its worker removes its files)", Args: exactly(1, workspaceUsage),
			RunE: func(c *cobra.Command, args []string) error { return a.deleteWorkspace(c.Context(), args[0]) }}),
		a.api(&cobra.Command{Use: "cp SRC DST", Short: "copy a file or a directory between here (a path, or -) and a workspace (WS:PATH)", Long: cpHelp, Args: exactly(2, workspaceUsage),
			RunE: func(c *cobra.Command, args []string) error { return a.workspaceCopy(c.Context(), args[0], args[1]) }}),
	)
}

func (a *App) listWorkspaces(ctx context.Context) error {
	c, err := a.client()
	if err != nil {
		return err
	}
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
	fmt.Fprintln(tw, "ID\tSANDBOX\tTASK\tHOST\tLAST RUN\tUSED\tQUOTA\tSNAPSHOT")
	for _, w := range list {
		used, snap, quota := "never", "-", "worker's"
		if w.QuotaBytes > 0 {
			quota = deployments.FormatSize(w.QuotaBytes)
		}
		if w.UsedAt != nil {
			used = w.UsedAt.Local().Format(time.DateTime)
		}
		if w.Snapshot != nil {
			snap = fmt.Sprint(w.Snapshot.Seq)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, orDash(w.Sandbox), w.TaskID, orDash(w.Host), orDash(w.LastRunID), used, quota, snap)
	}
	return tw.Flush()
}

func (a *App) showWorkspace(ctx context.Context, id string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	w, err := c.GetWorkspace(ctx, id)
	if err != nil {
		return err
	}
	return a.printJSON(w)
}

func (a *App) createWorkspace(ctx context.Context, req workspaces.CreateRequest) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	ws, err := c.CreateWorkspace(ctx, a.cfg.Project, a.cfg.Env, req)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(ws)
	}
	q := "the worker's quota"
	if ws.QuotaBytes > 0 {
		q = "a quota of " + deployments.FormatSize(ws.QuotaBytes)
	}
	fmt.Fprintf(a.Stdout, "created workspace %s for sandbox %s (task %s) in %s/%s, with %s\n", ws.ID, orDash(ws.Sandbox), ws.TaskID, ws.Project, ws.Env, q)
	return nil
}

func (a *App) deleteWorkspace(ctx context.Context, id string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := c.DeleteWorkspace(ctx, id); err != nil {
		return err
	}
	if !a.json {
		fmt.Fprintf(a.Stdout, "deleted workspace %s (its worker removes its files)\n", id)
	}
	return nil
}
