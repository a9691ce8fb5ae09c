package cli

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

const queuesUsage = "usage: helmr queues [list] | pause NAME | resume NAME"

// queuesCmd lists a project environment's queues and pauses or resumes
// one.
func (a *App) queuesCmd() *cobra.Command {
	pause := func(paused bool) func(c *cobra.Command, args []string) error {
		return func(c *cobra.Command, args []string) error { return a.pauseQueue(c.Context(), args[0], paused) }
	}
	c := parent(&cobra.Command{Use: "queues", Short: "list run queues (limits, queued, running); pause or resume one", GroupID: "runs"}, queuesUsage,
		a.api(&cobra.Command{Use: "list", Short: "list the project environment's queues", Args: exactly(0, queuesUsage),
			RunE: func(c *cobra.Command, _ []string) error { return a.listQueues(c.Context()) }}),
		a.api(&cobra.Command{Use: "pause NAME", Short: "start no more runs of a queue (those started go on)", Args: exactly(1, queuesUsage), RunE: pause(true)}),
		a.api(&cobra.Command{Use: "resume NAME", Short: "start a paused queue's runs again", Args: exactly(1, queuesUsage), RunE: pause(false)}),
	)
	c.Args = exactly(0, queuesUsage)
	c.RunE = func(c *cobra.Command, _ []string) error { return a.listQueues(c.Context()) }
	return a.api(c)
}

func (a *App) listQueues(ctx context.Context) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	qs, err := c.Queues(ctx, a.cfg.Project, a.cfg.Env)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(qs)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tLIMIT\tRUNNING\tQUEUED\tSTATE")
	for _, q := range qs {
		limit, state := "-", "active"
		if q.ConcurrencyLimit > 0 {
			limit = fmt.Sprint(q.ConcurrencyLimit)
		}
		if q.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", q.Name, limit, q.Running, q.Queued, state)
	}
	return tw.Flush()
}

func (a *App) pauseQueue(ctx context.Context, name string, paused bool) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	q, err := c.PauseQueue(ctx, a.cfg.Project, a.cfg.Env, name, paused)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(q)
	}
	verb := "resumed"
	if paused {
		verb = "paused: it starts no more runs until resumed"
	}
	fmt.Fprintf(a.Stdout, "queue %s %s (%d running, %d queued)\n", q.Name, verb, q.Running, q.Queued)
	return nil
}
