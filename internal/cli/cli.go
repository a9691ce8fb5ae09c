// Package cli implements the helmr command line: the user verbs (deploy,
// run, runs, logs, cancel) and the dev, server and worker commands.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/config"
)

// App is one invocation of the CLI.
type App struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	cfg            config.Config
	json           bool
	dev            bool // helmr dev: development defaults (a generated vault key)
}

type command struct {
	name, usage string
	run         func(ctx context.Context, a *App, args []string) error
}

func commands() []command {
	return []command{
		{"dev", "run the control plane, a worker and the embedded store in one process", runDev},
		{"server", "run the control plane (needs HELMR_OWNER_TOKEN(_FILE); remote workers connect with worker credentials)", runServer},
		{"worker", "run a worker against a control plane (--control-url; HELMR_WORKER_TOKEN: its worker credential)", runWorker},
		{"deploy", "deploy the task project at PATH as a new version", runDeploy},
		{"run", "start a run of TASK (--payload-json, --wait)", runRun},
		{"runs", "list runs, or `runs show ID`", runRuns},
		{"logs", "print a run's logs (-f to follow)", runLogs},
		{"cancel", "cancel a run", runCancel},
		{"approve", "`approve RUN [--data-json JSON]` answers the human wait (ctx.wait.human) a run waits on", runApprove},
		{"reject", "`reject RUN [--reason R]` rejects it: the task gets { ok: false, canceled: true, reason }", runReject},
		{"token", "`token list [--status S] [--run RUN] [--tag T]`, `token get ID`, `token complete ID --data-json JSON`, `token cancel ID [--reason R]`", runToken},
		{"image", "`image build PATH TASK` (--no-cache, --oci DIR, --ext4 FILE) builds a task's image here; `image export PATH TASK DIR` (--no-cache, --ext4 FILE) also writes it as an OCI image layout", runImage},
		{"exec", "`exec WORKSPACE -- CMD...`: run one command in a workspace (--cwd, -e K=V, --timeout, --stdin, --shell)", runExec},
		{"workspace", "`workspace create TASK`, `workspace create --sandbox NAME`, `workspace list`, `workspace show ID`, `workspace delete ID`, `workspace cp SRC DST`: workspaces keep files between the runs attached to them (`run --workspace ID`)", runWorkspace},
		{"secret", "`secret set NAME` (value on stdin), `secret list`, `secret delete NAME`, `secret rotate-key --new-key-file F`", runSecret},
		{"apikey", "`apikey create --env ENV --grant G1,G2 [--expires 30d] [--name N]` (prints the key once), `apikey create --worker` (a worker credential), `apikey list`, `apikey revoke ID` (owner credential only)", runAPIKey},
		{"doctor", "show which isolation tiers work on this host, and which one runs sandboxes", runDoctor},
		{"version", "print the version", func(_ context.Context, a *App, _ []string) error {
			fmt.Fprintln(a.Stdout, "helmr", Version)
			return nil
		}},
	}
}

// Version is the binary's version, set at build time.
var Version = "dev"

// Main runs the CLI and returns the process exit code. Every error is one
// line on stderr and a non-zero exit.
func (a *App) Main(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		a.usage(a.Stdout)
		return 0
	}
	cfg, err := config.Load(a.Getenv)
	if err != nil {
		fmt.Fprintln(a.Stderr, "helmr:", err)
		return 2
	}
	a.cfg = cfg
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.run(ctx, a, args[1:])
			if err == nil {
				return 0
			}
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			var ee exitError
			if errors.As(err, &ee) {
				return ee.code
			}
			fmt.Fprintln(a.Stderr, "helmr:", oneLine(err.Error()))
			return 1
		}
	}
	fmt.Fprintf(a.Stderr, "helmr: unknown command %q (see helmr help)\n", args[0])
	return 2
}

// exitError ends the CLI with a code and no further message.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func (a *App) usage(w io.Writer) {
	fmt.Fprintln(w, "helmr: a self-hosted runtime for coding agents")
	fmt.Fprintln(w, "\nusage: helmr COMMAND [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.usage)
	}
	fmt.Fprintln(w, "\nThe CLI authenticates with HELMR_API_KEY (an API key or the owner credential), else the credential helmr dev wrote to the profile.")
	fmt.Fprintln(w, "\nRun payloads are audit data: Helmr stores them in plaintext. Never put credentials in a payload.")
}

// flags builds a FlagSet with the client flags every user verb shares.
func (a *App) flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("helmr "+name, flag.ContinueOnError)
	fs.SetOutput(a.Stderr)
	fs.StringVar(&a.cfg.URL, "url", a.cfg.URL, "control plane URL ($HELMR_URL)")
	fs.StringVar(&a.cfg.Project, "project", a.cfg.Project, "project ($HELMR_PROJECT; default: the last deployed)")
	fs.StringVar(&a.cfg.Env, "env", a.cfg.Env, "environment ($HELMR_ENV)")
	fs.BoolVar(&a.json, "json", false, "print JSON for scripts")
	return fs
}

// parse parses flags that may appear before or after positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if len(args) > 0 && args[0] == "--" {
			return append(pos, args[1:]...), nil // everything after -- is positional
		}
		n := len(args)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(rest) < n && args[n-len(rest)-1] == "--" {
			return append(pos, rest...), nil // fs.Parse stopped at (and ate) --
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

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
