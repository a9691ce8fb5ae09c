package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/runs"
)

// runOptions are helmr run's flags.
type runOptions struct {
	payload, key, workspace string
	bindings                secretFlags
	wait                    bool
	flow                    client.TriggerOptions // queue, key, priority, tags, delay, ttl
}

func (a *App) runCmd() *cobra.Command {
	o := runOptions{bindings: secretFlags{}}
	c := &cobra.Command{
		Use:     "run TASK",
		Short:   "start a run of TASK (--payload-json, --wait)",
		GroupID: "runs",
		Args:    exactly(1, "usage: helmr run TASK [--payload-json JSON] [--workspace ID] [--wait]"),
		RunE:    func(c *cobra.Command, args []string) error { return a.run(c.Context(), args[0], o) },
	}
	f := c.Flags()
	f.StringVar(&o.payload, "payload-json", "null", "the run's JSON payload (stored in plaintext as audit data: never put secrets here; one holding a secret's value is refused)")
	f.Var(o.bindings, "secret", "bind a secret the task declares: NAME=vault:NAME (repeatable)")
	f.StringVar(&o.key, "idempotency-key", "", "a repeat with the same key returns the same run")
	f.BoolVar(&o.wait, "wait", false, "follow the run's logs and wait for it to finish; exit non-zero unless it completed")
	f.StringVar(&o.workspace, "workspace", "", "attach the run to this workspace (ws_…): it finds what the workspace's last run left; default: a new workspace")
	f.StringSliceVar(&o.flow.Tags, "tag", nil, "label the run (repeatable, at most 10; filter with helmr runs --tag)")
	f.IntVar(&o.flow.Priority, "priority", 0, "higher starts first within its queue (-1000 to 1000)")
	f.StringVar(&o.flow.Queue, "queue", "", "the queue the run waits in (default: its task's)")
	f.StringVar(&o.flow.ConcurrencyKey, "concurrency-key", "", "split the queue's concurrency limit per key (a tenant, a user)")
	f.StringVar(&o.flow.Delay, "delay", "", "start no sooner than this duration (\"10m\") or RFC 3339 time")
	f.StringVar(&o.flow.TTL, "ttl", "", "end the run EXPIRED if it has not started within this duration")
	f.StringVar(&o.flow.IdempotencyKeyTTL, "idempotency-key-ttl", "", "how long --idempotency-key returns the same run (default: for ever)")
	f.Float64Var(&o.flow.MachineCPU, "machine-cpu", 0, "size this run's sandbox: vCPUs, at most what its sandbox declares")
	f.StringVar(&o.flow.MachineMemory, "machine-memory", "", "size this run's sandbox: memory (\"256Mi\"), at most what its sandbox declares")
	return a.api(c)
}

func (a *App) run(ctx context.Context, task string, o runOptions) error {
	if !json.Valid([]byte(o.payload)) {
		return fmt.Errorf("--payload-json is not valid JSON: %s", o.payload)
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	opts := o.flow
	opts.Payload, opts.IdempotencyKey, opts.Secrets, opts.WorkspaceID = json.RawMessage(o.payload), o.key, o.bindings, o.workspace
	r, created, err := c.Trigger(ctx, a.cfg.Project, a.cfg.Env, task, opts)
	if err != nil {
		return err
	}
	if !o.wait {
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

const runsUsage = "usage: helmr runs [--task T] [--status S] [--tag T] [--queue Q] [--parent ID] | helmr runs show ID | helmr runs cancel|replay FILTERS [--dry-run]"

func (a *App) runsCmd() *cobra.Command {
	var f runs.Filter
	var status string
	c := &cobra.Command{
		Use:     "runs",
		Short:   "list runs (filters), show one, or cancel or replay many by filter",
		GroupID: "runs",
		Args:    exactly(0, runsUsage),
		RunE: func(c *cobra.Command, _ []string) error {
			f.Status = runs.Status(strings.ToUpper(status))
			return a.listRuns(c.Context(), f)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.TaskID, "task", "", "only runs of this task")
	fl.StringVar(&status, "status", "", "only runs in this status")
	fl.StringVar(&f.Kind, "kind", "", "task (the default) or build: the runs that build deployments' images")
	fl.StringVar(&f.Tag, "tag", "", "only runs carrying this tag")
	fl.StringVar(&f.Queue, "queue", "", "only runs of this queue")
	fl.StringVar(&f.ParentID, "parent", "", "only the children of this run")
	fl.IntVar(&f.Limit, "limit", 20, "page size")
	fl.StringVar(&f.Cursor, "cursor", "", "continue from a previous page")
	c.AddCommand(a.api(&cobra.Command{
		Use:   "show ID",
		Short: "show a run: its status, payload, output or error, what it waits on, its parent and children",
		Args:  exactly(1, runsUsage),
		RunE:  func(c *cobra.Command, args []string) error { return a.showRunView(c.Context(), args[0]) },
	}))
	return a.api(c)
}

func (a *App) showRunView(ctx context.Context, id string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	v, err := c.GetRunView(ctx, id)
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
	if len(v.Children) > 0 {
		fmt.Fprintf(a.Stdout, "children (%d):\n", len(v.Children))
		tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
		for _, c := range v.Children {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.ID, c.TaskID, c.Status)
		}
		tw.Flush()
		if len(v.Children) == runs.MaxChildrenShown {
			fmt.Fprintf(a.Stdout, "  (the latest %d: helmr runs --parent %s lists all)\n", runs.MaxChildrenShown, v.ID)
		}
	}
	return nil
}

func (a *App) listRuns(ctx context.Context, f runs.Filter) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	page, err := c.ListRuns(ctx, a.cfg.Project, a.cfg.Env, f)
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
	if r.ParentID != "" {
		fmt.Fprintf(tw, "parent\t%s\n", r.ParentID)
		if r.RootID != "" && r.RootID != r.ParentID {
			fmt.Fprintf(tw, "root\t%s\n", r.RootID)
		}
	}
	fmt.Fprintf(tw, "created\t%s\n", r.CreatedAt.Local().Format(time.RFC3339))
	if r.Queue != "" {
		q := r.Queue
		if r.ConcurrencyKey != "" {
			q += " (key " + r.ConcurrencyKey + ")"
		}
		if r.Priority != 0 {
			q += fmt.Sprintf(" priority %d", r.Priority)
		}
		fmt.Fprintf(tw, "queue\t%s\n", q)
	}
	if len(r.Tags) > 0 {
		fmt.Fprintf(tw, "tags\t%s\n", strings.Join(r.Tags, ", "))
	}
	if r.Retry != nil {
		fmt.Fprintf(tw, "attempt\t%d of %d\n", max(r.Attempt, 1), r.Retry.MaxAttempts)
	}
	for _, at := range r.Attempts {
		msg := string(at.Status)
		if at.Error != nil {
			msg += ": " + string(at.Error.Class) + ": " + at.Error.Message
		}
		fmt.Fprintf(tw, "attempt %d\t%s\n", at.Attempt, msg)
	}
	if r.AvailableAt != nil && r.Status == runs.StatusQueued {
		fmt.Fprintf(tw, "starts\tnot before %s\n", r.AvailableAt.Local().Format(time.RFC3339))
	}
	if r.ExpiresAt != nil && r.Status == runs.StatusQueued {
		fmt.Fprintf(tw, "expires\t%s if not started\n", r.ExpiresAt.Local().Format(time.RFC3339))
	}
	fmt.Fprintf(tw, "payload\t%s\n", r.Payload)
	tw.Flush()
	if r.Error != nil || len(r.Output) > 0 {
		a.printSummary(r)
	}
	return nil
}

func (a *App) logsCmd() *cobra.Command {
	var follow bool
	c := &cobra.Command{
		Use:     "logs RUN_ID",
		Short:   "print a run's logs (-f to follow)",
		GroupID: "runs",
		Args:    exactly(1, "usage: helmr logs RUN_ID [-f]"),
		RunE:    func(c *cobra.Command, args []string) error { return a.logs(c.Context(), args[0], follow) },
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "follow until the run finishes")
	aliases(c, map[string]string{"f": "follow"})
	return a.api(c)
}

func (a *App) logs(ctx context.Context, id string, follow bool) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if follow {
		return a.follow(ctx, c, id, false)
	}
	var after int64
	for {
		page, err := c.Events(ctx, id, after)
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

func (a *App) cancelCmd() *cobra.Command {
	return a.api(&cobra.Command{
		Use:     "cancel RUN_ID",
		Short:   "cancel a run",
		GroupID: "runs",
		Args:    exactly(1, "usage: helmr cancel RUN_ID"),
		RunE:    func(c *cobra.Command, args []string) error { return a.cancel(c.Context(), args[0]) },
	})
}

func (a *App) cancel(ctx context.Context, id string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	r, err := c.CancelRun(ctx, id)
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
func (f secretFlags) Type() string   { return "NAME=vault:NAME" }

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
