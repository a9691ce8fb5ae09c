// Package cli implements the helmr command line on a cobra command tree:
// the user verbs (deploy, run, runs, logs, ...) and the dev, server and
// worker commands. tree.go holds the tree; each verb's constructor sits
// next to its code.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/config"
)

// App is one invocation of the CLI.
type App struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	cfg            config.Config
	cfgErr         error // why the settings did not load: every verb fails with it
	json           bool
	dev            bool // helmr dev: development defaults (a generated vault key)
}

// Version is the binary's version, set at build time.
var Version = "dev"

func (a *App) versionCmd() *cobra.Command {
	return a.withJSON(&cobra.Command{
		Use:     "version",
		Short:   "print the version",
		GroupID: "admin",
		Args:    exactly(0, "usage: helmr version [--json]"),
		RunE: func(*cobra.Command, []string) error {
			if a.json {
				return a.printJSON(map[string]string{"version": Version})
			}
			fmt.Fprintln(a.Stdout, "helmr", Version)
			return nil
		},
	})
}

// Main runs the CLI and returns the process exit code. Every error is one
// line on stderr and a non-zero exit: 2 for an unknown verb or settings
// that do not load, a verb's own code (exitError), else 1.
func (a *App) Main(ctx context.Context, args []string) int {
	a.cfg, a.cfgErr = config.Load(a.Getenv)
	root := a.root()
	root.SetArgs(append([]string{}, args...)) // never nil: cobra reads os.Args then
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	_, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	code := 1
	var ee exitError
	if errors.As(err, &ee) {
		if ee.err == nil {
			return ee.code
		}
		code = ee.code
	}
	fmt.Fprintln(a.Stderr, "helmr:", oneLine(err.Error()))
	return code
}

// exitError ends the CLI with a code, and err's message if set.
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit %d", e.code)
}

func (e exitError) Unwrap() error { return e.err }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// client returns an API client, applying the profile for unset settings.
// Its credential is HELMR_API_KEY, else the profile's, which goes only to
// the profile's URL.
func (a *App) client() (*client.Client, error) {
	p, err := config.LoadProfile(a.cfg.Profile)
	if err != nil {
		return nil, err
	}
	if a.Getenv("HELMR_URL") == "" && a.cfg.URL == config.Default().URL && p.URL != "" {
		a.cfg.URL = p.URL
	}
	if a.cfg.Project == "" {
		a.cfg.Project = p.Project
	}
	cred := a.cfg.APIKey
	if cred == "" && p.Credential != "" && strings.TrimRight(p.URL, "/") == strings.TrimRight(a.cfg.URL, "/") {
		cred = p.Credential
	}
	return client.New(a.cfg.URL, cred), nil
}

func (a *App) requireProject() error {
	if a.cfg.Project == "" {
		return errors.New("no project selected: pass --project, set HELMR_PROJECT, or deploy one first")
	}
	return nil
}

func (a *App) printJSON(v any) error {
	enc := json.NewEncoder(a.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// rememberProject stores the project and URL in the profile.
func (a *App) rememberProject(project string) {
	p, _ := config.LoadProfile(a.cfg.Profile)
	p.Project, p.URL = project, a.cfg.URL
	if err := config.SaveProfile(a.cfg.Profile, p); err != nil {
		fmt.Fprintln(a.Stderr, "helmr: warning: cannot save profile:", err)
	}
}

// Run is the entry point used by cmd/helmr.
func Run(ctx context.Context, args []string) int {
	a := &App{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
	return a.Main(ctx, args)
}
