package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/workspaces"
)

// DefaultShellIdle is how long a workspace's shell session lives past
// its last request.
const DefaultShellIdle = 30 * time.Minute

// shellUse is what the worker keeps of one shell session of an
// operations sandbox (the shell itself is the guest agent's).
type shellUse struct {
	last    time.Time
	secrets map[string]string
	// creds are the egress-bound credentials the session's commands got
	// placeholders of, kept (bound in the network stack) while the
	// session lives, since a command may export one for later ones.
	creds   map[string]network.Credential
	removes []func()
}

// doShell serves a request on one of a workspace's shell sessions. Only
// open starts the workspace's sandbox; every other request finds its
// session in the sandbox that is up, or answers Missing.
func (w *Worker) doShell(ctx context.Context, op workspaces.Op) workspaces.OpResult {
	req := *op.Shell
	var ob *opBox
	var err error
	if req.Op == workspaces.ShellOpen {
		ob, err = w.opBoxFor(ctx, op)
	} else {
		ob = w.runningOpBox(op.Workspace.ID)
		if ob == nil {
			return w.shellResult(workspaces.ShellResult{Missing: true})
		}
	}
	if err != nil {
		return workspaces.OpResult{Error: err.Error()}
	}
	defer w.releaseOpBox(ob)
	shells, ok := ob.box.(sandbox.Shells)
	if !ok {
		return workspaces.OpResult{Error: fmt.Sprintf("the %s tier has no shell sessions", w.cfg.Runtime.Name())}
	}
	if req.Op == workspaces.ShellCloseAll {
		for _, name := range ob.shellNames() {
			if _, err := shells.Shell(ctx, sandbox.ShellRequest{Op: sandbox.ShellClose, Name: name}); err != nil && !errors.Is(err, sandbox.ErrNoShell) {
				return workspaces.OpResult{Error: err.Error()}
			}
			ob.forgetShell(name)
		}
		return w.shellResult(workspaces.ShellResult{})
	}
	secrets := ob.useShell(req.Session, op.Secrets, req.Op == workspaces.ShellOpen)
	held, fresh, err := heldSecrets(op, ob.shellCreds(req.Session))
	if err != nil {
		return workspaces.OpResult{Error: err.Error()}
	}
	if remove := ob.trust.add(fresh); !ob.keepShellCreds(req.Session, fresh, remove) {
		defer remove()
	}
	sreq := sandbox.ShellRequest{
		Op: req.Op, Name: req.Session, StartupSource: req.StartupSource,
		Command: req.WithSecrets(held).Command, Retries: req.Retries,
		Timeout: time.Duration(req.TimeoutSeconds * float64(time.Second)), MaxOutput: workspaces.MaxOutputBytes,
	}
	if req.Op == workspaces.ShellOpen {
		sreq.Env, sreq.Cwd, sreq.UID, sreq.GID = dedupeEnv(ob.env), ob.wsPath, ob.uid, ob.gid
		sreq.Timeout = 0
	}
	ctx, cancel := context.WithTimeout(ctx, req.Timeout()+10*time.Second)
	defer cancel()
	res, err := shells.Shell(ctx, sreq)
	switch {
	case errors.Is(err, sandbox.ErrNoShell):
		ob.forgetShell(req.Session)
		return w.shellResult(workspaces.ShellResult{Missing: true})
	case errors.Is(err, sandbox.ErrShellExists):
		return w.shellResult(workspaces.ShellResult{Exists: true})
	case err != nil:
		if req.Op == workspaces.ShellOpen {
			ob.forgetShell(req.Session)
		}
		return workspaces.OpResult{Error: workspaces.Redact(fmt.Sprintf("shell session %s: %v", req.Session, err), secrets)}
	}
	if res.Exited || req.Op == workspaces.ShellClose {
		ob.forgetShell(req.Session)
	}
	out := workspaces.ShellResult{
		Output: workspaces.Redact(BackslashReplace(res.Output), secrets), OutputCut: res.OutputCut, ExitCode: res.ExitCode,
		TimedOut: res.TimedOut, SyntaxError: res.SyntaxError, SyntaxStderr: workspaces.Redact(res.SyntaxStderr, secrets), Exited: res.Exited,
	}
	if res.OutputCut > 0 {
		out.Output += fmt.Sprintf("\n[helmr: output truncated: %d more bytes]\n", res.OutputCut)
	}
	return w.shellResult(out)
}

func (w *Worker) shellResult(res workspaces.ShellResult) workspaces.OpResult {
	return workspaces.OpResult{Shell: &res, Host: w.cfg.Capabilities.Host}
}

// runningOpBox returns the operations sandbox of workspace id if it is
// up, held for one operation (release it with releaseOpBox), or nil.
func (w *Worker) runningOpBox(id string) *opBox {
	w.opMu.Lock()
	defer w.opMu.Unlock()
	ob, ok := w.opBoxes[id]
	if !ok {
		return nil
	}
	ob.mu.Lock()
	defer ob.mu.Unlock()
	ob.active++
	return ob
}

// useShell marks session name used now (opening it if open) and returns
// every secret value its commands have seen, secrets included.
func (ob *opBox) useShell(name string, secrets map[string]string, open bool) map[string]string {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	u := ob.shells[name]
	if u == nil {
		if !open {
			return secrets
		}
		u = &shellUse{secrets: map[string]string{}}
		ob.shells[name] = u
	}
	u.last = time.Now()
	maps.Copy(u.secrets, secrets)
	return maps.Clone(u.secrets)
}

func (ob *opBox) forgetShell(name string) {
	ob.mu.Lock()
	u := ob.shells[name]
	delete(ob.shells, name)
	ob.mu.Unlock()
	if u != nil {
		for _, remove := range u.removes {
			remove()
		}
	}
}

// shellCreds returns the credentials session name holds placeholders of.
func (ob *opBox) shellCreds(name string) map[string]network.Credential {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if u := ob.shells[name]; u != nil {
		return maps.Clone(u.creds)
	}
	return nil
}

// keepShellCreds makes session name keep creds (and call remove when it
// ends); false if there is no such session.
func (ob *opBox) keepShellCreds(name string, creds []network.Credential, remove func()) bool {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	u := ob.shells[name]
	if u == nil {
		return false
	}
	if u.creds == nil {
		u.creds = map[string]network.Credential{}
	}
	for _, c := range creds {
		u.creds[c.Name] = c
	}
	u.removes = append(u.removes, remove)
	return true
}

func (ob *opBox) shellNames() []string {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	names := make([]string, 0, len(ob.shells))
	for n := range ob.shells {
		names = append(names, n)
	}
	return names
}

// expireShells closes ob's sessions idle past the worker's ShellIdle and
// returns how long until the next of the others could expire (0: none
// left).
func (w *Worker) expireShells(ob *opBox) time.Duration {
	ob.mu.Lock()
	var stale []string
	var removes []func()
	next := time.Duration(0)
	for name, u := range ob.shells {
		left := w.cfg.ShellIdle - time.Since(u.last)
		if left <= 0 {
			stale = append(stale, name)
			removes = append(removes, u.removes...)
			delete(ob.shells, name)
			continue
		}
		if next == 0 || left < next {
			next = left
		}
	}
	ob.mu.Unlock()
	for _, remove := range removes {
		remove()
	}
	if shells, ok := ob.box.(sandbox.Shells); ok && len(stale) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, name := range stale {
			_, _ = shells.Shell(ctx, sandbox.ShellRequest{Op: sandbox.ShellClose, Name: name})
			w.log.Info("closed an idle shell session", "workspace_id", ob.ws, "session", name)
		}
	}
	return next
}

// BackslashReplace decodes b as UTF-8, writing each byte that is not
// part of valid UTF-8 as \xNN (Python's errors="backslashreplace", how
// SWE-ReX's sessions decode their terminal).
func BackslashReplace(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 16)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			fmt.Fprintf(&sb, `\x%02x`, b[0])
			b = b[1:]
			continue
		}
		sb.Write(b[:n])
		b = b[n:]
	}
	return sb.String()
}
