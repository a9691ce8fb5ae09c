package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/runs"
)

// replayFlags are what helmr replay and helmr runs replay may change of
// the runs they replay.
type replayFlags struct {
	payload  string
	tags     []string
	bindings secretFlags
	queue    string
	key      string
	priority int
}

// add puts the flags that edit a replay on c. On helmr runs replay
// (bulk) --tag and --queue are the filter's: there a replay edits only
// its payload and secret bindings (the API takes every override).
func (o *replayFlags) add(c *cobra.Command, bulk bool) {
	f := c.Flags()
	f.StringVar(&o.payload, "payload-json", "", "the replay's JSON payload instead of the original's (checked as a trigger's is; never put secrets here)")
	f.Var(o.bindings, "secret", "bind a secret instead of the original's bindings: NAME=vault:NAME (repeatable)")
	if bulk {
		return
	}
	f.StringSliceVar(&o.tags, "tag", nil, "the replay's tags instead of the original's (repeatable)")
	f.StringVar(&o.queue, "queue", "", "the queue the replay waits in instead of the original's")
	f.StringVar(&o.key, "concurrency-key", "", "the replay's concurrency key instead of the original's")
	f.IntVar(&o.priority, "priority", 0, "the replay's priority instead of the original's (-1000 to 1000)")
}

// options reads the flags given on c (those not given keep the
// original's value).
func (o *replayFlags) options(c *cobra.Command) (client.ReplayOptions, error) {
	var r client.ReplayOptions
	f := c.Flags()
	if f.Changed("payload-json") {
		if !json.Valid([]byte(o.payload)) {
			return r, fmt.Errorf("--payload-json is not valid JSON: %s", o.payload)
		}
		r.Payload = json.RawMessage(o.payload)
	}
	if len(o.bindings) > 0 {
		r.Secrets = o.bindings
	}
	if f.Lookup("priority") == nil {
		return r, nil // bulk: the other flags are the filter's
	}
	if f.Changed("tag") {
		r.Tags = &o.tags
	}
	if f.Changed("queue") {
		r.Queue = &o.queue
	}
	if f.Changed("concurrency-key") {
		r.ConcurrencyKey = &o.key
	}
	if f.Changed("priority") {
		r.Priority = &o.priority
	}
	return r, nil
}

func (a *App) replayCmd() *cobra.Command {
	o := replayFlags{bindings: secretFlags{}}
	var workspace, idemKey string
	var wait bool
	c := &cobra.Command{
		Use:   "replay RUN_ID",
		Short: "start a new run of a run's task with its payload and options (--payload-json to edit)",
		Long: `Replay a run: a new run of the same task (its latest deployment) in the same project environment, linked to the original (replayOf).

It takes the original's payload, secret bindings, queue, concurrency key, priority and tags, except those the flags change, and gets a new workspace unless --workspace names one.`,
		GroupID: "runs",
		Args:    exactly(1, "usage: helmr replay RUN_ID [--payload-json JSON] [--tag T] [--wait]"),
	}
	o.add(c, false)
	c.Flags().StringVar(&workspace, "workspace", "", "attach the replay to this workspace (ws_…); default: a new workspace")
	c.Flags().StringVar(&idemKey, "idempotency-key", "", "a repeat with the same key returns the same replay")
	c.Flags().BoolVar(&wait, "wait", false, "follow the replay's logs and wait for it to finish; exit non-zero unless it completed")
	c.RunE = func(c *cobra.Command, args []string) error {
		opts, err := o.options(c)
		if err != nil {
			return err
		}
		opts.WorkspaceID, opts.IdempotencyKey = workspace, idemKey
		return a.replay(c.Context(), args[0], opts, wait)
	}
	return a.api(c)
}

func (a *App) replay(ctx context.Context, id string, o client.ReplayOptions, wait bool) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	r, created, err := c.ReplayRun(ctx, id, o)
	if err != nil {
		return err
	}
	if !wait {
		if a.json {
			return a.printJSON(r)
		}
		verb := "started"
		if !created {
			verb = "existing"
		}
		fmt.Fprintf(a.Stdout, "%s run %s (%s), a replay of %s, in workspace %s\n", verb, r.ID, r.Status, id, r.WorkspaceID)
		return nil
	}
	if !a.json {
		fmt.Fprintf(a.Stderr, "run %s (a replay of %s) queued; following its logs\n", r.ID, id)
	}
	return a.follow(ctx, c, r.ID, true)
}

// bulkFlags are the filter of helmr runs cancel and helmr runs replay.
type bulkFlags struct {
	f            client.BulkFilter
	since, until string
}

func (b *bulkFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.StringVar(&b.f.Task, "task", "", "only runs of this task")
	f.StringVar(&b.f.Status, "status", "", "only runs in this status (QUEUED, WAITING, CANCELED, ...)")
	f.StringVar(&b.f.Tag, "tag", "", "only runs carrying this tag")
	f.StringVar(&b.f.Queue, "queue", "", "only runs of this queue")
	f.StringVar(&b.since, "since", "", "only runs created since this RFC 3339 time, or this long ago (\"2h\")")
	f.StringVar(&b.until, "until", "", "only runs created before this RFC 3339 time, or this long ago")
	f.StringSliceVar(&b.f.IDs, "id", nil, "only these runs (repeatable, or comma-separated)")
	f.IntVar(&b.f.Limit, "limit", runs.MaxBulk, fmt.Sprintf("act on at most this many runs (at most %d); more: continue with --cursor", runs.MaxBulk))
	f.StringVar(&b.f.Cursor, "cursor", "", "continue where the previous call stopped")
	f.BoolVar(&b.f.DryRun, "dry-run", false, "list what would be done and do nothing")
}

// filter is the flags' filter, with times ago made times.
func (b *bulkFlags) filter(now time.Time) (client.BulkFilter, error) {
	f := b.f
	f.Status = strings.ToUpper(f.Status)
	for _, t := range []struct {
		flag, v string
		to      *string
	}{{"since", b.since, &f.Since}, {"until", b.until, &f.Until}} {
		if t.v == "" {
			continue
		}
		if d, err := time.ParseDuration(t.v); err == nil && d >= 0 {
			*t.to = now.Add(-d).UTC().Format(time.RFC3339Nano)
			continue
		}
		if _, err := time.Parse(time.RFC3339Nano, t.v); err != nil {
			return f, fmt.Errorf("--%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (\"2h\")", t.flag, t.v)
		}
		*t.to = t.v
	}
	return f, nil
}

const bulkExample = `  helmr runs cancel --task review --status QUEUED
  helmr runs cancel --tag nightly --dry-run
  helmr runs replay --tag nightly --status FAILED --payload-json '{"retry": true}'`

// withBulkVerbs adds the bulk actions to helmr runs: cancel and replay.
func (a *App) withBulkVerbs(runsCmd *cobra.Command) *cobra.Command {
	var cb bulkFlags
	cancel := &cobra.Command{
		Use:     "cancel [--task T] [--status S] [--tag T] [--queue Q] [--since T] [--until T] [--id ID] [--dry-run]",
		Short:   "cancel the runs a filter selects (runs that ended are skipped)",
		Example: bulkExample,
		Args:    exactly(0, "usage: helmr runs cancel --task T | --status S | --tag T | --queue Q | --since T | --id ID ... [--dry-run]"),
		RunE: func(c *cobra.Command, _ []string) error {
			f, err := cb.filter(time.Now())
			if err != nil {
				return err
			}
			return a.bulk(c.Context(), "cancel", f, nil)
		},
	}
	cb.add(cancel)

	var rb bulkFlags
	ro := replayFlags{bindings: secretFlags{}}
	replay := &cobra.Command{
		Use:     "replay [--task T] [--status S] [--tag T] [--queue Q] [--since T] [--until T] [--id ID] [--payload-json JSON] [--dry-run]",
		Short:   "replay the runs a filter selects, each with its payload and options (--payload-json to edit)",
		Example: bulkExample,
		Args:    exactly(0, "usage: helmr runs replay --task T | --status S | --tag T | --queue Q | --since T | --id ID ... [--payload-json JSON] [--dry-run]"),
		RunE: func(c *cobra.Command, _ []string) error {
			f, err := rb.filter(time.Now())
			if err != nil {
				return err
			}
			o, err := ro.options(c)
			if err != nil {
				return err
			}
			return a.bulk(c.Context(), "replay", f, &o)
		},
	}
	rb.add(replay)
	ro.add(replay, true)
	runsCmd.AddCommand(a.api(cancel), a.api(replay))
	return runsCmd
}

// bulk runs one bulk action (verb cancel or replay) and prints what it
// did; it exits 1 if the action failed for any run.
func (a *App) bulk(ctx context.Context, verb string, f client.BulkFilter, o *client.ReplayOptions) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	var res runs.BulkResult
	if verb == "cancel" {
		res, err = c.BulkCancel(ctx, a.cfg.Project, a.cfg.Env, f)
	} else {
		if o != nil && o.Payload == nil && o.Tags == nil && o.Secrets == nil && o.Queue == nil && o.ConcurrencyKey == nil && o.Priority == nil {
			o = nil // no overrides: each replay as its original
		}
		res, err = c.BulkReplay(ctx, a.cfg.Project, a.cfg.Env, f, o)
	}
	if err != nil {
		return err
	}
	if a.json {
		if err := a.printJSON(res); err != nil {
			return err
		}
	} else {
		a.printBulk(verb, res)
	}
	if res.Counts[runs.BulkFailed] > 0 {
		return exitError{code: 1}
	}
	return nil
}

func (a *App) printBulk(verb string, res runs.BulkResult) {
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	if len(res.Runs) > 0 {
		fmt.Fprintln(tw, "RUN\tSTATUS\tACTION\tDETAIL")
	}
	for _, it := range res.Runs {
		detail := it.Reason
		if it.NewRunID != "" {
			detail = "new run " + it.NewRunID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", it.RunID, it.Status, strings.ReplaceAll(it.Action, "_", " "), detail)
	}
	tw.Flush()
	var counts []string
	for action, n := range res.Counts {
		counts = append(counts, fmt.Sprintf("%s %d", strings.ReplaceAll(action, "_", " "), n))
	}
	sort.Strings(counts)
	summary := fmt.Sprintf("%s: %d run(s) matched", verb, res.Matched)
	if len(counts) > 0 {
		summary += "; " + strings.Join(counts, ", ")
	}
	if res.DryRun {
		summary += " (dry run: nothing was done)"
	}
	fmt.Fprintln(a.Stdout, summary)
	if res.More {
		fmt.Fprintf(a.Stdout, "more runs match: run it again with --cursor %s\n", res.NextCursor)
	}
}
