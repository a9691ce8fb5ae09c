package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/workspaces"
)

// execOptions are helmr exec's flags.
type execOptions struct {
	cwd                  string
	timeout              float64
	stdin, shell, stream bool
	env                  envFlags
}

func (a *App) execCmd() *cobra.Command {
	o := execOptions{env: envFlags{}}
	c := &cobra.Command{
		Use:   "exec WORKSPACE [flags] -- CMD [ARGS...]",
		Short: "run one command in a workspace (--cwd, -e K=V, --timeout, --stdin, --shell)",
		Long: `Run one command in a workspace: its output on stdout and stderr, its exit
code as helmr's (124 when killed at its timeout). Everything after -- is the
command, dashes included.`,
		GroupID:               "workspaces",
		DisableFlagsInUseLine: true,
		Args: nargs("usage: helmr exec WORKSPACE [--cwd DIR] [-e K=V] [--timeout SECONDS] [--stdin] [--shell] [--stream] -- CMD [ARGS...]",
			func(n int) bool { return n >= 2 }),
		RunE: func(c *cobra.Command, args []string) error { return a.exec(c.Context(), args[0], args[1:], o) },
	}
	f := c.Flags()
	f.StringVar(&o.cwd, "cwd", "", "working directory, relative to the workspace")
	f.Float64Var(&o.timeout, "timeout", 0, "seconds before the command is killed (default 60)")
	f.BoolVar(&o.stdin, "stdin", false, "send this command's standard input to the command")
	f.BoolVar(&o.shell, "shell", false, "run CMD as one /bin/sh -c string")
	f.BoolVar(&o.stream, "stream", false, "print the output as the command prints it (line by line) instead of at its end")
	f.VarP(o.env, "env-var", "e", "add K=V to the command's environment (repeatable; --env is the project environment)")
	aliases(c, map[string]string{"e": "env-var"})
	return a.api(c)
}

// exec is `helmr exec WS [flags] -- CMD [ARGS...]`: one command in a
// workspace, its output on stdout and stderr, its exit code as helmr's.
func (a *App) exec(ctx context.Context, ws string, argv []string, o execOptions) error {
	req := workspaces.ExecRequest{Argv: argv, Cwd: o.cwd, Env: o.env, TimeoutSeconds: o.timeout}
	if o.shell {
		req.Argv, req.Command = nil, strings.Join(argv, " ")
	}
	if o.stdin {
		data, err := io.ReadAll(io.LimitReader(a.Stdin, workspaces.MaxStdinBytes+1))
		if err != nil {
			return err
		}
		req.Stdin = string(data)
	}
	c, err := a.client()
	if err != nil {
		return err
	}
	var res workspaces.ExecResult
	if o.stream && !a.json {
		res, err = c.ExecStream(ctx, ws, req, func(o workspaces.OpOutput) {
			if o.Stream == "stderr" {
				io.WriteString(a.Stderr, o.Data)
			} else {
				io.WriteString(a.Stdout, o.Data)
			}
		})
		res.Stdout, res.Stderr = "", "" // printed already
	} else {
		res, err = c.Exec(ctx, ws, req)
	}
	if err != nil {
		return err
	}
	if a.json {
		if err := a.printJSON(res); err != nil {
			return err
		}
	} else {
		io.WriteString(a.Stdout, res.Stdout)
		io.WriteString(a.Stderr, res.Stderr)
	}
	switch {
	case res.TimedOut:
		fmt.Fprintf(a.Stderr, "helmr: the command was killed after its timeout (%.1fs)\n", res.DurationMs/1000)
		return exitError{code: 124}
	case res.ExitCode != 0:
		return exitError{code: res.ExitCode}
	case res.Signal != "":
		return exitError{code: 128}
	}
	return nil
}

type envFlags map[string]string

func (f envFlags) String() string { return "" }
func (f envFlags) Type() string   { return "K=V" }

func (f envFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", v)
	}
	f[k] = val
	return nil
}
