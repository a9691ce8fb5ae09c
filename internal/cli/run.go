package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/runs"
)

func runRun(ctx context.Context, a *App, args []string) error {
	fs := a.flags("run")
	payload := fs.String("payload-json", "null", "the run's JSON payload (stored in plaintext as audit data: never put secrets here; one holding a secret's value is refused)")
	bindings := secretFlags{}
	fs.Var(bindings, "secret", "bind a secret the task declares: NAME=vault:NAME (repeatable)")
	key := fs.String("idempotency-key", "", "a repeat with the same key returns the same run")
	wait := fs.Bool("wait", false, "follow the run's logs and wait for it to finish; exit non-zero unless it completed")
	workspace := fs.String("workspace", "", "attach the run to this workspace (ws_…): it finds what the workspace's last run left; default: a new workspace")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: helmr run TASK [--payload-json JSON] [--workspace ID] [--wait]")
	}
	if !json.Valid([]byte(*payload)) {
		return fmt.Errorf("--payload-json is not valid JSON: %s", *payload)
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	r, created, err := c.Trigger(ctx, a.cfg.Project, a.cfg.Env, pos[0], client.TriggerOptions{
		Payload: json.RawMessage(*payload), IdempotencyKey: *key, Secrets: bindings, WorkspaceID: *workspace})
	if err != nil {
		return err
	}
	if !*wait {
		if a.json {
			return a.printJSON(r)
		}
		verb := "started"
		if !created {
			verb = "existing"
		}
		fmt.Fprintf(a.Stdout, "%s run %s (%s) in workspace %s\n", verb, r.ID, r.Status, r.WorkspaceID)
		return nil
	}
	if !a.json {
		fmt.Fprintf(a.Stderr, "run %s queued; following its logs\n", r.ID)
	}
	return a.follow(ctx, c, r.ID, true)
}

// follow prints a run's events until it ends, then its final state; with
// failExit the exit code is non-zero unless the run completed.
func (a *App) follow(ctx context.Context, c *client.Client, id string, failExit bool) error {
	err := c.Follow(ctx, id, 0, func(ev runs.Event) error {
		a.printEvent(ev)
		return nil
	})
	if err != nil {
		return err
	}
	r, err := c.GetRun(ctx, id)
	if err != nil {
		return err
	}
	if a.json {
		if err := a.printJSON(r); err != nil {
			return err
		}
	} else {
		a.printSummary(r)
	}
	if failExit && r.Status != runs.StatusCompleted {
		return exitError{code: 1}
	}
	return nil
}

func (a *App) printEvent(ev runs.Event) {
	if a.json {
		data, _ := json.Marshal(ev)
		fmt.Fprintln(a.Stdout, string(data))
		return
	}
	ts := ev.Time.Local().Format("15:04:05.000")
	switch ev.Type {
	case runs.EventLog:
		var l runs.LogData
		_ = json.Unmarshal(ev.Data, &l)
		fmt.Fprintf(a.Stdout, "%s %s\n", ts, l.Line)
	case runs.EventStatus:
		var s runs.StatusData
		_ = json.Unmarshal(ev.Data, &s)
		fmt.Fprintf(a.Stdout, "%s ── %s\n", ts, s.To)
	case runs.EventSystem:
		var s runs.SystemData
		_ = json.Unmarshal(ev.Data, &s)
		fmt.Fprintf(a.Stdout, "%s ── %s\n", ts, s.Message)
	}
}

func (a *App) printSummary(r runs.Run) {
	fmt.Fprintf(a.Stdout, "run %s %s", r.ID, r.Status)
	if r.StartedAt != nil && r.FinishedAt != nil {
		fmt.Fprintf(a.Stdout, " in %s", r.FinishedAt.Sub(*r.StartedAt).Round(time.Millisecond))
	}
	fmt.Fprintln(a.Stdout)
	if r.Error != nil {
		fmt.Fprintf(a.Stdout, "error (%s): %s\n", r.Error.Class, r.Error.Message)
		if r.Error.Stack != "" {
			fmt.Fprintln(a.Stdout, indent(r.Error.Stack))
		}
	}
	if len(r.Output) > 0 {
		fmt.Fprintf(a.Stdout, "output: %s\n", r.Output)
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

func runRuns(ctx context.Context, a *App, args []string) error {
	fs := a.flags("runs")
	task := fs.String("task", "", "only runs of this task")
	status := fs.String("status", "", "only runs in this status")
	kind := fs.String("kind", "", "task (the default) or build: the runs that build deployments' images")
	limit := fs.Int("limit", 20, "page size")
	cursor := fs.String("cursor", "", "continue from a previous page")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if len(pos) == 2 && pos[0] == "show" {
		v, err := c.GetRunView(ctx, pos[1])
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(v)
		}
		if err := a.showRun(v.Run); err != nil {
			return err
		}
		for _, w := range v.WaitingOn {
			line := fmt.Sprintf("waiting on %s (%s)", w.ID, w.Kind)
			if w.DisplayText != "" {
				line += ": " + w.DisplayText
			}
			if w.TimeoutAt != nil {
				line += " (times out " + w.TimeoutAt.Local().Format(time.RFC3339) + ")"
			}
			fmt.Fprintln(a.Stdout, line)
		}
		if len(v.WaitingOn) > 0 && v.WaitingOn[0].Kind == "human" {
			fmt.Fprintf(a.Stdout, "answer: helmr approve %s [--data-json JSON] | helmr reject %s [--reason R]\n", v.ID, v.ID)
		}
		return nil
	}
	if len(pos) != 0 {
		return errors.New("usage: helmr runs [--task T] [--status S] | helmr runs show ID")
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	page, err := c.ListRuns(ctx, a.cfg.Project, a.cfg.Env, runs.Filter{
		TaskID: *task, Status: runs.Status(strings.ToUpper(*status)), Kind: *kind, Limit: *limit, Cursor: *cursor})
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(page)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTASK\tSTATUS\tTIER\tCREATED")
	for _, r := range page.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.TaskID, r.Status, tierLabel(r.Tier), r.CreatedAt.Local().Format(time.DateTime))
	}
	tw.Flush()
	if page.NextCursor != "" {
		fmt.Fprintf(a.Stdout, "more: helmr runs --cursor %s\n", page.NextCursor)
	}
	return nil
}

// tierLabel flags the weak tier wherever a run's tier is shown.
func tierLabel(t string) string {
	if t == "process" {
		return "process (weak isolation)"
	}
	return t
}

func (a *App) showRun(r runs.Run) error {
	if a.json {
		return a.printJSON(r)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\ntask\t%s\nstatus\t%s\n", r.ID, r.TaskID, r.Status)
	fmt.Fprintf(tw, "project\t%s/%s\ndeployment\t%s (version %d)\n", r.Project, r.Env, r.DeploymentID, r.DeploymentVersion)
	if r.Tier != "" {
		fmt.Fprintf(tw, "tier\t%s\n", tierLabel(r.Tier))
	}
	fmt.Fprintf(tw, "created\t%s\n", r.CreatedAt.Local().Format(time.RFC3339))
	fmt.Fprintf(tw, "payload\t%s\n", r.Payload)
	tw.Flush()
	if r.Error != nil || len(r.Output) > 0 {
		a.printSummary(r)
	}
	return nil
}

func runLogs(ctx context.Context, a *App, args []string) error {
	fs := a.flags("logs")
	followFlag := fs.Bool("f", false, "follow until the run finishes")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: helmr logs RUN_ID [-f]")
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if *followFlag {
		return a.follow(ctx, c, pos[0], false)
	}
	var after int64
	for {
		page, err := c.Events(ctx, pos[0], after)
		if err != nil {
			return err
		}
		for _, ev := range page.Events {
			a.printEvent(ev)
		}
		if len(page.Events) == 0 {
			return nil
		}
		after = page.NextCursor
	}
}

func runCancel(ctx context.Context, a *App, args []string) error {
	fs := a.flags("cancel")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: helmr cancel RUN_ID")
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	r, err := c.CancelRun(ctx, pos[0])
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(r)
	}
	fmt.Fprintf(a.Stdout, "run %s %s\n", r.ID, r.Status)
	return nil
}

// secretFlags collects --secret NAME=SOURCE bindings.
type secretFlags map[string]string

func (f secretFlags) String() string { return "" }

func (f secretFlags) Set(v string) error {
	name, src, ok := strings.Cut(v, "=")
	if !ok || name == "" || src == "" {
		return fmt.Errorf("want NAME=vault:NAME, got %q", v)
	}
	if _, dup := f[name]; dup {
		return fmt.Errorf("secret %s bound twice", name)
	}
	f[name] = src
	return nil
}
