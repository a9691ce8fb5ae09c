package cli

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/helmr/helmr/internal/config"
)

// commands are helmr's verbs (help lists them by group, alphabetically). A
// verb's constructor sits next to its code.
func (a *App) commands() []*cobra.Command {
	return []*cobra.Command{
		a.devCmd(), a.serverCmd(), a.workerCmd(), a.initCmd(),
		a.deployCmd(), a.runCmd(), a.withBulkVerbs(a.runsCmd()), a.replayCmd(), a.logsCmd(), a.cancelCmd(), a.queuesCmd(),
		a.approveCmd(), a.rejectCmd(), a.tokenCmd(), a.scheduleCmd(),
		a.workspaceCmd(), a.execCmd(), a.imageCmd(),
		a.secretCmd(), a.apikeyCmd(), a.doctorCmd(), a.settingsCmd(), a.versionCmd(),
	}
}

// Help groups: each verb names one (GroupID).
var groups = []*cobra.Group{
	{ID: "serve", Title: "Run Helmr:"},
	{ID: "runs", Title: "Tasks and runs:"},
	{ID: "workspaces", Title: "Workspaces and images:"},
	{ID: "admin", Title: "Administration:"},
}

const rootLong = `helmr: a self-hosted runtime for coding agents

The CLI authenticates with HELMR_API_KEY (an API key or the owner credential), else the credential helmr dev wrote to the profile.

Run payloads are audit data: Helmr stores them in plaintext. Never put credentials in a payload.

Settings come from defaults, the operator's config file, HELMR_* environment variables and flags: helmr settings lists them.`

// root is the command tree of one invocation; its flags are bound to
// a.cfg, loaded before the tree is built so that help shows the values in
// effect.
func (a *App) root() *cobra.Command {
	root := &cobra.Command{
		Use:   "helmr COMMAND [flags] [args]",
		Short: "a self-hosted runtime for coding agents",
		Long:  rootLong,
		// The root runs only for no verb or an unknown one; it parses no
		// flags, so an unknown verb with flags is still an unknown verb.
		Args:                  cobra.ArbitraryArgs,
		DisableFlagParsing:    true,
		DisableFlagsInUseLine: true,
		SilenceErrors:         true,
		SilenceUsage:          true,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
				return c.Help()
			}
			return exitError{code: 2, err: fmt.Errorf("unknown command %q (see helmr help)", args[0])}
		},
	}
	root.SetUsageTemplate(usageTemplate)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see %s --help)", err, c.CommandPath())
	})
	root.AddGroup(groups...)
	for _, c := range a.commands() {
		root.AddCommand(c)
	}
	a.bindSettings(root)
	return root
}

// bindSettings gives each verb the flags the table of settings says it
// takes (config.Setting.FlagOn), bound to a.cfg, and makes every verb
// fail on a config that did not load (help still works).
func (a *App) bindSettings(root *cobra.Command) {
	walk(root, func(c *cobra.Command) {
		if c == root {
			return
		}
		path := commandPath(c)
		for _, s := range config.Settings() {
			if s.Flag != "" && (slices.Contains(s.FlagOn, path) || isAPIVerb(c) && slices.Contains(s.FlagOn, config.APIVerbs)) {
				c.Flags().Var(s.Bind(&a.cfg), s.Flag, flagUsage(s))
			}
		}
		if run := c.RunE; run != nil {
			c.RunE = func(c *cobra.Command, args []string) error {
				if a.cfgErr != nil {
					return exitError{code: 2, err: a.cfgErr}
				}
				return run(c, args)
			}
		}
	})
}

// flagUsage is a setting's doc as a flag's usage: plain text, naming the
// variable.
func flagUsage(s config.Setting) string {
	doc := strings.ReplaceAll(s.Doc, "`", "")
	if s.Default == "" && s.Shown != "" {
		return fmt.Sprintf("%s ($%s; default: %s)", doc, s.Name, strings.ReplaceAll(s.Shown, "`", ""))
	}
	return fmt.Sprintf("%s ($%s)", doc, s.Name)
}

// commandPath is c's path below the root: "secret rotate-key".
func commandPath(c *cobra.Command) string {
	_, p, _ := strings.Cut(c.CommandPath(), " ")
	return p
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

const apiAnnotation = "helmr/api"

// api marks c as a verb that talks to the control plane: it takes the
// client flags (--url, --project, --env: config.APIVerbs) and --json.
func (a *App) api(c *cobra.Command) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[apiAnnotation] = "true"
	return a.withJSON(c)
}

func isAPIVerb(c *cobra.Command) bool { return c.Annotations[apiAnnotation] != "" }

// withJSON gives c the --json flag: print JSON for scripts.
func (a *App) withJSON(c *cobra.Command) *cobra.Command {
	c.Flags().BoolVar(&a.json, "json", false, "print JSON for scripts")
	return c
}

// parent is a verb whose sub-verbs do the work; alone, or with an unknown
// sub-verb, it fails with usage.
func parent(c *cobra.Command, usage string, subs ...*cobra.Command) *cobra.Command {
	c.Args = cobra.ArbitraryArgs
	c.DisableFlagsInUseLine = true
	c.RunE = func(*cobra.Command, []string) error { return errors.New(usage) }
	c.AddCommand(subs...)
	return c
}

// nargs checks a verb's positional arguments: ok(n), else usage.
func nargs(usage string, ok func(n int) bool) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if !ok(len(args)) {
			return errors.New(usage)
		}
		return nil
	}
}

// exactly is nargs for exactly n arguments.
func exactly(n int, usage string) cobra.PositionalArgs {
	return nargs(usage, func(k int) bool { return k == n })
}

// aliases lets --NAME stand for a flag's long name (flags kept from
// before the command tree, where -f and --f were the same flag).
func aliases(c *cobra.Command, names map[string]string) {
	c.Flags().SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if long, ok := names[name]; ok {
			return pflag.NormalizedName(long)
		}
		return pflag.NormalizedName(name)
	})
}

// usageTemplate is cobra's, except that a runnable verb with sub-verbs
// shows its own use line only.
const usageTemplate = `Usage:{{if .Runnable}}
  {{.UseLine}}{{else if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}{{$cmds := .Commands}}{{if eq (len .Groups) 0}}

Available Commands:{{range $cmds}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{else}}{{range $group := .Groups}}

{{.Title}}{{range $cmds}}{{if (and (eq .GroupID $group.ID) (or .IsAvailableCommand (eq .Name "help")))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if not .AllChildCommandsHaveGroup}}

Additional Commands:{{range $cmds}}{{if (and (eq .GroupID "") (or .IsAvailableCommand (eq .Name "help")))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasHelpSubCommands}}

Additional help topics:{{range .Commands}}{{if .IsAdditionalHelpTopicCommand}}
  {{rpad .CommandPath .CommandPathPadding}} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`
