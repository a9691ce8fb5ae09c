package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/config"
)

// settingsCmd prints every setting (config.Settings) with the value it
// has here: the default, the config file and the environment applied.
func (a *App) settingsCmd() *cobra.Command {
	var markdown bool
	c := &cobra.Command{
		Use:     "settings",
		Short:   "list every setting (HELMR_*), its value here, default and flag",
		GroupID: "admin",
		Args:    exactly(0, "usage: helmr settings [--json | --markdown]"),
		RunE: func(*cobra.Command, []string) error {
			if markdown {
				_, err := io.WriteString(a.Stdout, config.MarkdownTable())
				return err
			}
			return a.printSettings()
		},
	}
	c.Flags().BoolVar(&markdown, "markdown", false, "print the table as README.md shows it (Markdown), without values")
	return a.withJSON(c)
}

// settingView is one setting as helmr settings prints it.
type settingView struct {
	Name    string   `json:"name"`
	Value   string   `json:"value"` // empty: unset; a secret's is "(set)"
	Default string   `json:"default"`
	Doc     string   `json:"doc"`
	ReadBy  []string `json:"readBy"`
	Flag    string   `json:"flag,omitempty"`
	FlagOn  []string `json:"flagOn,omitempty"`
}

func (a *App) printSettings() error {
	plain := func(s string) string { return strings.ReplaceAll(s, "`", "") }
	var views []settingView
	for _, s := range config.Settings() {
		v := settingView{Name: s.Name, Default: plain(s.ShownDefault()), Doc: plain(s.Doc), ReadBy: s.ReadBy, FlagOn: s.FlagOn}
		if s.Flag != "" {
			v.Flag = "--" + s.Flag
		}
		if b := s.Bind(&a.cfg); b != nil {
			v.Value = b.String()
		} else if s.Name == "HELMR_CONFIG" {
			v.Value = config.File(a.Getenv)
		}
		if s.Secret && v.Value != "" {
			v.Value = "(set)"
		}
		views = append(views, v)
	}
	if a.json {
		return a.printJSON(views)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVALUE\tFLAG\tDEFAULT")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, orDash(v.Value), orDash(v.Flag), v.Default)
	}
	return tw.Flush()
}
