package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/helmr/helmr/internal/workspaces"
)

// runExec is `helmr exec WS [flags] -- CMD [ARGS...]`: one command in a
// workspace, its output on stdout and stderr, its exit code as helmr's.
func runExec(ctx context.Context, a *App, args []string) error {
	const usage = "usage: helmr exec WORKSPACE [--cwd DIR] [-e K=V] [--timeout SECONDS] [--stdin] [--shell] [--stream] -- CMD [ARGS...]"
	fs := a.flags("exec")
	cwd := fs.String("cwd", "", "working directory, relative to the workspace")
	timeout := fs.Float64("timeout", 0, "seconds before the command is killed (default 60)")
	stdin := fs.Bool("stdin", false, "send this command's standard input to the command")
	shell := fs.Bool("shell", false, "run CMD as one /bin/sh -c string")
	stream := fs.Bool("stream", false, "print the output as the command prints it (line by line) instead of at its end")
	env := envFlags{}
	fs.Var(env, "e", "add K=V to the command's environment (repeatable; --env is the project environment)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return errors.New(usage)
	}
	req := workspaces.ExecRequest{Argv: pos[1:], Cwd: *cwd, Env: env, TimeoutSeconds: *timeout}
	if *shell {
		req.Argv, req.Command = nil, strings.Join(pos[1:], " ")
	}
	if *stdin {
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
	if *stream && !a.json {
		res, err = c.ExecStream(ctx, pos[0], req, func(o workspaces.OpOutput) {
			if o.Stream == "stderr" {
				io.WriteString(a.Stderr, o.Data)
			} else {
				io.WriteString(a.Stdout, o.Data)
			}
		})
		res.Stdout, res.Stderr = "", "" // printed already
	} else {
		res, err = c.Exec(ctx, pos[0], req)
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

func (f envFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", v)
	}
	f[k] = val
	return nil
}
