package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/helmr/helmr/internal/waitpoints"
)

const tokenUsage = "usage: helmr token list [--status S] [--run RUN] [--tag T] | get ID | complete ID [--data-json JSON] | cancel ID [--reason R]"

// runToken lists, shows, completes and cancels waitpoints (tokens, human
// waits, timers).
func runToken(ctx context.Context, a *App, args []string) error {
	if len(args) == 0 {
		return errors.New(tokenUsage)
	}
	fs := a.flags("token " + args[0])
	status := fs.String("status", "", "list: only waitpoints in this status (WAITING, COMPLETED, TIMED_OUT, CANCELED)")
	run := fs.String("run", "", "list: only waitpoints of this run")
	tag := fs.String("tag", "", "list: only waitpoints with this tag")
	limit := fs.Int("limit", 20, "list: page size")
	cursor := fs.String("cursor", "", "list: continue from a previous page")
	data := fs.String("data-json", "", "complete: the data (JSON) the waiting task gets")
	reason := fs.String("reason", "", "cancel: why (the waiting task gets it)")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	var w waitpoints.Waitpoint
	switch {
	case args[0] == "list" && len(pos) == 0:
		if err := a.requireProject(); err != nil {
			return err
		}
		page, err := c.ListTokens(ctx, a.cfg.Project, a.cfg.Env, waitpoints.Filter{
			Status: waitpoints.Status(strings.ToUpper(*status)), RunID: *run, Tag: *tag, Limit: *limit, Cursor: *cursor})
		if err != nil {
			return err
		}
		if a.json {
			return a.printJSON(page)
		}
		tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tKIND\tSTATUS\tRUN\tCREATED\tTEXT")
		for _, w := range page.Waitpoints {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", w.ID, w.Kind, w.Status, orDash(w.RunID),
				w.CreatedAt.Local().Format(time.DateTime), w.DisplayText)
		}
		tw.Flush()
		if page.NextCursor != "" {
			fmt.Fprintf(a.Stdout, "more: helmr token list --cursor %s\n", page.NextCursor)
		}
		return nil
	case args[0] == "get" && len(pos) == 1:
		w, err = c.GetToken(ctx, pos[0])
	case args[0] == "complete" && len(pos) == 1:
		d, derr := dataJSON(*data)
		if derr != nil {
			return derr
		}
		w, err = c.CompleteToken(ctx, pos[0], d)
	case args[0] == "cancel" && len(pos) == 1:
		w, err = c.CancelToken(ctx, pos[0], *reason)
	default:
		return errors.New(tokenUsage)
	}
	if err != nil {
		return err
	}
	return a.showWaitpoint(w)
}

// dataJSON checks --data-json; empty is null.
func dataJSON(s string) (json.RawMessage, error) {
	if s == "" {
		return json.RawMessage("null"), nil
	}
	if !json.Valid([]byte(s)) {
		return nil, fmt.Errorf("--data-json is not valid JSON: %s", s)
	}
	return json.RawMessage(s), nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *App) showWaitpoint(w waitpoints.Waitpoint) error {
	if a.json {
		return a.printJSON(w)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\nkind\t%s\nstatus\t%s\n", w.ID, w.Kind, w.Status)
	if w.RunID != "" {
		fmt.Fprintf(tw, "run\t%s\n", w.RunID)
	}
	if w.DisplayText != "" {
		fmt.Fprintf(tw, "text\t%s\n", w.DisplayText)
	}
	if len(w.Tags) > 0 {
		fmt.Fprintf(tw, "tags\t%s\n", strings.Join(w.Tags, ", "))
	}
	if w.TimeoutAt != nil {
		fmt.Fprintf(tw, "timeout\t%s\n", w.TimeoutAt.Local().Format(time.RFC3339))
	}
	if len(w.Data) > 0 {
		fmt.Fprintf(tw, "data\t%s\n", w.Data)
	}
	if w.Reason != "" {
		fmt.Fprintf(tw, "reason\t%s\n", w.Reason)
	}
	return tw.Flush()
}

// runApprove completes the human wait (ctx.wait.human) a run waits on.
func runApprove(ctx context.Context, a *App, args []string) error {
	fs := a.flags("approve")
	data := fs.String("data-json", "", "the answer (JSON) the task gets as { ok: true, data }")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: helmr approve RUN_ID [--data-json JSON]")
	}
	var d json.RawMessage
	if *data != "" {
		if d, err = dataJSON(*data); err != nil {
			return err
		}
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	w, err := c.Approve(ctx, pos[0], d)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(w)
	}
	fmt.Fprintf(a.Stdout, "approved run %s (waitpoint %s)\n", pos[0], w.ID)
	return nil
}

// runReject cancels the human wait a run waits on: the task gets
// { ok: false, canceled: true, reason }.
func runReject(ctx context.Context, a *App, args []string) error {
	fs := a.flags("reject")
	reason := fs.String("reason", "", "why (the task gets it; default \"rejected\")")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("usage: helmr reject RUN_ID [--reason R]")
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	w, err := c.Reject(ctx, pos[0], *reason)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(w)
	}
	fmt.Fprintf(a.Stdout, "rejected run %s (waitpoint %s): %s\n", pos[0], w.ID, w.Reason)
	return nil
}
