package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/workspaces"
)

// runWorkspace is `helmr workspace list|show|delete`.
func runWorkspace(ctx context.Context, a *App, args []string) error {
	const usage = "usage: helmr workspace create [--quota SIZE] TASK | create [--quota SIZE] --sandbox NAME | list | show ID | delete ID | cp SRC DST (one side WS:PATH, the other a local file or -)"
	if len(args) == 0 {
		return errors.New(usage)
	}
	fs := a.flags("workspace " + args[0])
	var sandbox, quota string
	if args[0] == "create" {
		fs.StringVar(&sandbox, "sandbox", "", "make the workspace for the deployed sandbox with this name (sandbox(\"NAME\") in the task code) instead of a task's")
		fs.StringVar(&quota, "quota", "", "the workspace's size quota (\"512Mi\", \"20Gi\"; 8Mi to 16Ti); default: the worker's HELMR_WORKSPACE_QUOTA")
	}
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
	case args[0] == "show" && len(pos) == 1:
		w, err := c.GetWorkspace(ctx, pos[0])
		if err != nil {
			return err
		}
		return a.printJSON(w)
	case args[0] == "create" && len(pos) == 1 != (sandbox != ""):
		if err := a.requireProject(); err != nil {
			return err
		}
		task := ""
		if len(pos) == 1 {
			task = pos[0]
		}
		ws, err := c.CreateWorkspace(ctx, a.cfg.Project, a.cfg.Env, workspaces.CreateRequest{Task: task, Sandbox: sandbox, Quota: quota})
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
	case args[0] == "cp" && len(pos) == 2:
		return a.workspaceCopy(ctx, c, pos[0], pos[1])
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

// workspaceCopy copies one file between this machine (a path, or - for
// standard input/output) and a workspace (WS:PATH, relative to it).
func (a *App) workspaceCopy(ctx context.Context, c *client.Client, src, dst string) error {
	remote := func(s string) (string, string, bool) {
		ws, p, ok := strings.Cut(s, ":")
		return ws, p, ok && strings.HasPrefix(ws, workspaces.Prefix)
	}
	sws, sp, sremote := remote(src)
	dws, dp, dremote := remote(dst)
	switch {
	case sremote && !dremote:
		data, err := c.ReadFile(ctx, sws, sp)
		if err != nil {
			return err
		}
		if dst == "-" {
			_, err = a.Stdout.Write(data)
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	case dremote && !sremote:
		var data []byte
		var err error
		if src == "-" {
			data, err = io.ReadAll(a.Stdin)
		} else {
			data, err = os.ReadFile(src)
		}
		if err != nil {
			return err
		}
		return c.WriteFile(ctx, dws, dp, data)
	}
	return errors.New("helmr workspace cp: one side is WS:PATH (ws_...:path/in/workspace), the other a local path or -")
}
