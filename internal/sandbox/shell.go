package sandbox

import (
	"context"
	"errors"
	"time"
)

// Shells is implemented by sandboxes whose guest agent holds long-lived
// shell sessions: a bash on a pseudo-terminal per session, kept between
// commands, so that everything a shell keeps (working directory, cd -,
// exported and unexported variables, functions, aliases, options, jobs)
// carries from one command to the next exactly as when a person types
// them. Sessions are named, unique in their sandbox, and end with it.
type Shells interface {
	// Shell performs one request on a session of the sandbox. Requests
	// on one session are served in order, one at a time (as a single
	// shell reads one line after another), except an interrupt, which
	// reaches the command that runs. Errors: ErrNoShell,
	// ErrShellExists, ErrGuestRuntime.
	Shell(ctx context.Context, req ShellRequest) (ShellResult, error)
}

// Shell request operations.
const (
	// ShellOpen starts session Name: bash as UID:GID with Env in Cwd,
	// sources each of StartupSource, then makes the prompt Helmr's.
	// Output is what the startup printed.
	ShellOpen = "open"
	// ShellRun checks Command's syntax (bash -n, as SWE-ReX does) and, if
	// it parses, runs it in the session and waits up to Timeout for it
	// (waiting for an earlier command of the session counts).
	ShellRun = "run"
	// ShellInterrupt sends the session's terminal an interrupt (^C), up
	// to Retries times, waiting Timeout after each for the shell to be
	// ready again; then suspends and kills the job. Output is what the
	// interrupted command printed since its run gave up on it.
	ShellInterrupt = "interrupt"
	// ShellClose ends the session (its shell and everything it started).
	ShellClose = "close"
)

// ShellRequest is one request on a shell session.
type ShellRequest struct {
	Op   string // ShellOpen, ShellRun, ShellInterrupt or ShellClose
	Name string // the session, unique in the sandbox

	// Open: the shell's environment (KEY=VALUE, the whole of it), working
	// directory (default: the workspace), user (in-guest ids), and the
	// files it sources before it serves.
	Env           []string
	Cwd           string
	UID, GID      uint32
	StartupSource []string

	// Run: the command, as typed (any number of lines).
	Command string
	// Timeout bounds a run (how long it waits for its command) and each
	// try of an interrupt; 0 means no bound for a run and 1 s for an
	// interrupt try.
	Timeout time.Duration
	// Retries is how many interrupts to try (default 3).
	Retries int
	// MaxOutput caps the output a result carries (0: 1 MiB); the rest is
	// counted in OutputCut, and never changes the exit code.
	MaxOutput int
}

// ShellResult answers a ShellRequest.
type ShellResult struct {
	// Output is what the command (or startup) printed on the terminal,
	// "\r\n" made "\n", at most MaxOutput bytes, raw (not necessarily
	// UTF-8).
	Output []byte
	// OutputCut is how many more bytes it printed past MaxOutput.
	OutputCut int64
	// ExitCode is the command's exit status ($? after it), whatever the
	// size of its output.
	ExitCode int
	// TimedOut: the command was still running at Timeout; it goes on in
	// the session (an interrupt, or waiting, ends it). Output holds what
	// it printed so far.
	TimedOut bool
	// SyntaxError: Command does not parse and did not run; Output is what
	// bash -n printed on stdout, SyntaxStderr on stderr, ExitCode its
	// exit status.
	SyntaxError  bool
	SyntaxStderr string
	// Exited: the shell ended (the command ran exit); the session is
	// gone and ExitCode is the shell's.
	Exited bool
}

// Errors of Shells.Shell.
var (
	// ErrNoShell: no session of that name in the sandbox.
	ErrNoShell = errors.New("no such shell session")
	// ErrShellExists: ShellOpen on a name already in use.
	ErrShellExists = errors.New("shell session exists")
)
