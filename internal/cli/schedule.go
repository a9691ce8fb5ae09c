package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/schedules"
)

const scheduleUsage = "usage: helmr schedules create TASK --cron EXPR [--timezone TZ] [--external-id ID] [--dedup-key KEY] [--inactive] | list [--task T] [--type TYPE] | get ID | update ID [--task T] [--cron EXPR] [--timezone TZ] [--external-id ID] | delete ID | activate ID | deactivate ID"

// scheduleCmd creates, lists, shows, changes, (de)activates and deletes
// cron schedules.
func (a *App) scheduleCmd() *cobra.Command {
	var req client.ScheduleRequest
	var inactive bool
	create := &cobra.Command{
		Use:   "create TASK",
		Short: "schedule runs of a deployed task (--cron, six fields for seconds; --dedup-key updates the schedule holding it)",
		Args:  exactly(1, scheduleUsage),
		RunE: func(c *cobra.Command, args []string) error {
			if err := a.requireProject(); err != nil {
				return err
			}
			req.Task = args[0]
			if inactive {
				off := false
				req.Active = &off
			}
			return a.scheduleOp(func(cl *client.Client) (schedules.Schedule, error) {
				s, _, err := cl.CreateSchedule(c.Context(), a.cfg.Project, a.cfg.Env, req)
				return s, err
			})
		},
	}
	fl := create.Flags()
	fl.StringVar(&req.Cron, "cron", "", `cron expression: "0 9 * * 1-5", or six fields with leading seconds ("*/30 * * * * *")`)
	fl.StringVar(&req.Timezone, "timezone", "", "IANA time zone the cron is read in (default UTC)")
	fl.StringVar(&req.ExternalID, "external-id", "", "your reference; each run's payload carries it")
	fl.StringVar(&req.DeduplicationKey, "dedup-key", "", "creating again with this key updates the schedule instead")
	fl.BoolVar(&inactive, "inactive", false, "create it deactivated")

	var f schedules.Filter
	var typ string
	list := &cobra.Command{
		Use:   "list",
		Short: "list schedules (--task T, --type DECLARATIVE|IMPERATIVE)",
		Args:  exactly(0, scheduleUsage),
		RunE: func(c *cobra.Command, _ []string) error {
			f.Type = schedules.Type(strings.ToUpper(typ))
			return a.listSchedules(c.Context(), f)
		},
	}
	fl = list.Flags()
	fl.StringVar(&f.TaskID, "task", "", "only schedules of this task")
	fl.StringVar(&typ, "type", "", "only DECLARATIVE (from deployments) or IMPERATIVE (API, CLI) schedules")
	fl.IntVar(&f.Limit, "limit", 20, "page size")
	fl.StringVar(&f.Cursor, "cursor", "", "continue from a previous page")

	get := a.scheduleVerb("get", "show a schedule", func(ctx context.Context, cl *client.Client, id string) (schedules.Schedule, error) {
		return cl.GetSchedule(ctx, id)
	})
	var upTask, upCron, upTZ, upExt string
	update := &cobra.Command{
		Use:   "update ID",
		Short: "change an imperative schedule's task, cron, zone or external id (the flags given)",
		Args:  exactly(1, scheduleUsage),
		RunE: func(c *cobra.Command, args []string) error {
			fields := map[string]string{}
			for flag, field := range map[string]string{"task": "task", "cron": "cron", "timezone": "timezone", "external-id": "externalId"} {
				if c.Flags().Changed(flag) {
					v, _ := c.Flags().GetString(flag)
					fields[field] = v
				}
			}
			if len(fields) == 0 {
				return fmt.Errorf("nothing to change: give --task, --cron, --timezone or --external-id\n%s", scheduleUsage)
			}
			return a.scheduleOp(func(cl *client.Client) (schedules.Schedule, error) {
				return cl.UpdateSchedule(c.Context(), args[0], fields)
			})
		},
	}
	fl = update.Flags()
	fl.StringVar(&upTask, "task", "", "the task it runs")
	fl.StringVar(&upCron, "cron", "", "the cron expression")
	fl.StringVar(&upTZ, "timezone", "", "the IANA time zone")
	fl.StringVar(&upExt, "external-id", "", "your reference")
	del := &cobra.Command{
		Use:   "delete ID",
		Short: "delete an imperative schedule (a declared one goes with the deploy that drops it)",
		Args:  exactly(1, scheduleUsage),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := a.client()
			if err != nil {
				return err
			}
			if err := cl.DeleteSchedule(c.Context(), args[0]); err != nil {
				return err
			}
			if a.json {
				return a.printJSON(map[string]any{"id": args[0], "deleted": true})
			}
			fmt.Fprintf(a.Stdout, "deleted schedule %s\n", args[0])
			return nil
		},
	}
	activate := a.scheduleVerb("activate", "activate a schedule: its next tick is the first after now", func(ctx context.Context, cl *client.Client, id string) (schedules.Schedule, error) {
		return cl.SetScheduleActive(ctx, id, true)
	})
	deactivate := a.scheduleVerb("deactivate", "deactivate a schedule (a declared one stays so through deploys)", func(ctx context.Context, cl *client.Client, id string) (schedules.Schedule, error) {
		return cl.SetScheduleActive(ctx, id, false)
	})
	return parent(&cobra.Command{
		Use:     "schedules COMMAND",
		Aliases: []string{"schedule"},
		Short:   "create, list, show, change, activate, deactivate or delete cron schedules of tasks",
		GroupID: "runs",
	}, scheduleUsage, a.api(create), a.api(list), a.api(get), a.api(update), a.api(del), a.api(activate), a.api(deactivate))
}

// scheduleVerb is a sub-verb taking a schedule id and showing the
// schedule op returns.
func (a *App) scheduleVerb(name, short string, op func(context.Context, *client.Client, string) (schedules.Schedule, error)) *cobra.Command {
	return &cobra.Command{
		Use:   name + " ID",
		Short: short,
		Args:  exactly(1, scheduleUsage),
		RunE: func(c *cobra.Command, args []string) error {
			return a.scheduleOp(func(cl *client.Client) (schedules.Schedule, error) { return op(c.Context(), cl, args[0]) })
		},
	}
}

func (a *App) listSchedules(ctx context.Context, f schedules.Filter) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	if err := a.requireProject(); err != nil {
		return err
	}
	page, err := c.ListSchedules(ctx, a.cfg.Project, a.cfg.Env, f)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(page)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTASK\tTYPE\tCRON\tTIMEZONE\tACTIVE\tNEXT\tLAST RUN")
	for _, s := range page.Schedules {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%s\t%s\n", s.ID, s.TaskID, s.Type, s.Cron, s.Timezone, s.Active,
			localTime(s.NextRunAt), orDash(s.LastRunID))
	}
	tw.Flush()
	if page.NextCursor != "" {
		fmt.Fprintf(a.Stdout, "more: helmr schedules list --cursor %s\n", page.NextCursor)
	}
	return nil
}

func localTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

// scheduleOp calls the API with op and shows the schedule it returns.
func (a *App) scheduleOp(op func(*client.Client) (schedules.Schedule, error)) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	s, err := op(c)
	if err != nil {
		return err
	}
	if a.json {
		return a.printJSON(s)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%s\ntask\t%s\ntype\t%s\ncron\t%s\ntimezone\t%s\nactive\t%t\nnext\t%s\n",
		s.ID, s.TaskID, s.Type, s.Cron, s.Timezone, s.Active, localTime(s.NextRunAt))
	if s.ExternalID != "" {
		fmt.Fprintf(tw, "external id\t%s\n", s.ExternalID)
	}
	if s.DeduplicationKey != "" {
		fmt.Fprintf(tw, "dedup key\t%s\n", s.DeduplicationKey)
	}
	if s.LastRunAt != nil {
		fmt.Fprintf(tw, "last tick\t%s (%s)\n", localTime(s.LastRunAt), orDash(s.LastRunID))
	}
	if s.LastError != "" {
		fmt.Fprintf(tw, "last error\t%s\n", s.LastError)
	}
	return tw.Flush()
}
