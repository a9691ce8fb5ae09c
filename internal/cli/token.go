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
	"github.com/helmr/helmr/internal/waitpoints"
)

const tokenUsage = "usage: helmr token list [--status S] [--run RUN] [--tag T] | get ID | complete ID [--data-json JSON] | cancel ID [--reason R]"

// tokenCmd lists, shows, completes and cancels waitpoints (tokens, human
// waits, timers).
func (a *App) tokenCmd() *cobra.Command {
	var f waitpoints.Filter
	var status, data, reason string
	list := &cobra.Command{
		Use:   "list",
		Short: "list waitpoints (--status S, --run RUN, --tag T)",
		Args:  exactly(0, tokenUsage),
		RunE: func(c *cobra.Command, _ []string) error {
			f.Status = waitpoints.Status(strings.ToUpper(status))
			return a.listTokens(c.Context(), f)
		},
	}
	fl := list.Flags()
	fl.StringVar(&status, "status", "", "only waitpoints in this status (WAITING, COMPLETED, TIMED_OUT, CANCELED)")
	fl.StringVar(&f.RunID, "run", "", "only waitpoints of this run")
	fl.StringVar(&f.Tag, "tag", "", "only waitpoints with this tag")
	fl.IntVar(&f.Limit, "limit", 20, "page size")
	fl.StringVar(&f.Cursor, "cursor", "", "continue from a previous page")
	get := &cobra.Command{
		Use:   "get ID",
		Short: "show a waitpoint",
		Args:  exactly(1, tokenUsage),
		RunE: func(c *cobra.Command, args []string) error {
			return a.tokenOp(func(cl *client.Client) (waitpoints.Waitpoint, error) { return cl.GetToken(c.Context(), args[0]) })
		},
	}
	complete := &cobra.Command{
		Use:   "complete ID",
		Short: "complete a waitpoint: the waiting task gets --data-json",
		Args:  exactly(1, tokenUsage),
		RunE: func(c *cobra.Command, args []string) error {
			d, err := dataJSON(data)
			if err != nil {
				return err
			}
			return a.tokenOp(func(cl *client.Client) (waitpoints.Waitpoint, error) {
				return cl.CompleteToken(c.Context(), args[0], d)
			})
		},
	}
	complete.Flags().StringVar(&data, "data-json", "", "the data (JSON) the waiting task gets")
	cancel := &cobra.Command{
		Use:   "cancel ID",
		Short: "cancel a waitpoint: the waiting task gets --reason",
		Args:  exactly(1, tokenUsage),
		RunE: func(c *cobra.Command, args []string) error {
			return a.tokenOp(func(cl *client.Client) (waitpoints.Waitpoint, error) {
				return cl.CancelToken(c.Context(), args[0], reason)
			})
		},
	}
	cancel.Flags().StringVar(&reason, "reason", "", "why (the waiting task gets it)")
	return parent(&cobra.Command{
		Use:     "token COMMAND",
		Short:   "list, show, complete or cancel waitpoints (tokens, human waits, timers)",
		GroupID: "runs",
	}, tokenUsage, a.api(list), a.api(get), a.api(complete), a.api(cancel))
}

func (a *App) listTokens(ctx context.Context, f waitpoints.Filter) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	page, err := c.ListTokens(ctx, a.cfg.Project, a.cfg.Env, f)
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
}

// tokenOp calls the API with op and shows the waitpoint it returns.
func (a *App) tokenOp(op func(*client.Client) (waitpoints.Waitpoint, error)) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	w, err := op(c)
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

// approveCmd completes the human wait (ctx.wait.human) a run waits on.
func (a *App) approveCmd() *cobra.Command {
	var data string
	c := &cobra.Command{
		Use:     "approve RUN_ID",
		Short:   "answer the human wait (ctx.wait.human) a run waits on: the wait resolves to the answer",
		GroupID: "runs",
		Args:    exactly(1, "usage: helmr approve RUN_ID [--data-json JSON]"),
		RunE:    func(c *cobra.Command, args []string) error { return a.approve(c.Context(), args[0], data) },
	}
	c.Flags().StringVar(&data, "data-json", "", "the answer (JSON) ctx.wait.human resolves to (human.result: { ok: true, data })")
	return a.api(c)
}

func (a *App) approve(ctx context.Context, run, data string) error {
	var d json.RawMessage
	if data != "" {
		var err error
		if d, err = dataJSON(data); err != nil {
			return err
		}
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	w, err := c.Approve(ctx, run, d)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(w)
	}
	fmt.Fprintf(a.Stdout, "approved run %s (waitpoint %s)\n", run, w.ID)
	return nil
}

// rejectCmd cancels the human wait a run waits on: ctx.wait.human throws
// a WaitRejectedError (human.result: { ok: false, canceled: true, reason }).
func (a *App) rejectCmd() *cobra.Command {
	var reason string
	c := &cobra.Command{
		Use:     "reject RUN_ID",
		Short:   "reject the human wait a run waits on: ctx.wait.human throws a WaitRejectedError with the reason",
		GroupID: "runs",
		Args:    exactly(1, "usage: helmr reject RUN_ID [--reason R]"),
		RunE:    func(c *cobra.Command, args []string) error { return a.reject(c.Context(), args[0], reason) },
	}
	c.Flags().StringVar(&reason, "reason", "", "why (the task's WaitRejectedError carries it; default \"rejected\")")
	return a.api(c)
}

func (a *App) reject(ctx context.Context, run, reason string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	w, err := c.Reject(ctx, run, reason)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(w)
	}
	fmt.Fprintf(a.Stdout, "rejected run %s (waitpoint %s): %s\n", run, w.ID, w.Reason)
	return nil
}
