package worker

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/workspaces"
)

// shellBox is a sandbox whose shells answer from a script: each run
// prints the command back.
type shellBox struct {
	sandbox.Sandbox
	mu     sync.Mutex
	open   map[string]bool
	closed []string
}

func (b *shellBox) Shell(_ context.Context, req sandbox.ShellRequest) (sandbox.ShellResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case req.Op == sandbox.ShellOpen:
		b.open[req.Name] = true
		return sandbox.ShellResult{}, nil
	case !b.open[req.Name]:
		return sandbox.ShellResult{}, sandbox.ErrNoShell
	case req.Op == sandbox.ShellClose:
		delete(b.open, req.Name)
		b.closed = append(b.closed, req.Name)
		return sandbox.ShellResult{}, nil
	}
	return sandbox.ShellResult{Output: []byte(req.Command + "\n\xff"), OutputCut: 7, ExitCode: 3}, nil
}

func (b *shellBox) Destroy(context.Context) error { return nil }

func shellWorker(t *testing.T) (*Worker, *shellBox, *opBox) {
	t.Helper()
	w := &Worker{cfg: Config{WorkspaceIdle: time.Hour, ShellIdle: time.Minute}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), opBoxes: map[string]*opBox{}}
	box := &shellBox{open: map[string]bool{}}
	ob := &opBox{ws: "ws_1", box: box, shells: map[string]*shellUse{}, dir: t.TempDir()}
	w.opBoxes["ws_1"] = ob
	t.Cleanup(func() {
		if ob.idle != nil {
			ob.idle.Stop()
		}
	})
	return w, box, ob
}

func shellOp(req workspaces.ShellRequest, secrets map[string]string) workspaces.Op {
	return workspaces.Op{Workspace: workspaces.Workspace{ID: "ws_1"}, Shell: &req, Secrets: secrets}
}

// TestShellKeepsRedactingWhatASessionSaw: a value a session's command
// used stays redacted in the session's later output, which may print it
// from the shell's state with no reference to it.
func TestShellKeepsRedactingWhatASessionSaw(t *testing.T) {
	w, box, ob := shellWorker(t)
	box.open["s"] = true // opened as opBoxFor would have
	ob.shells["s"] = &shellUse{last: time.Now(), secrets: map[string]string{}}
	res := w.doShell(t.Context(), shellOp(workspaces.ShellRequest{Op: workspaces.ShellRun, Session: "s", Command: "export T=${vault:TOKEN}"}, map[string]string{"TOKEN": "s3cr3t-value"}))
	if res.Shell == nil || strings.Contains(res.Shell.Output, "s3cr3t-value") || !strings.Contains(res.Shell.Output, "[redacted:TOKEN]") {
		t.Fatalf("run with a secret = %+v, want it redacted", res)
	}
	res = w.doShell(t.Context(), shellOp(workspaces.ShellRequest{Op: workspaces.ShellRun, Session: "s", Command: "echo s3cr3t-value"}, nil))
	if res.Shell == nil || strings.Contains(res.Shell.Output, "s3cr3t-value") {
		t.Fatalf("a later run printing the value = %+v, want it redacted", res)
	}
	if got := res.Shell; got.ExitCode != 3 || got.OutputCut != 7 || !strings.Contains(got.Output, `\xff`) || !strings.HasSuffix(got.Output, "[helmr: output truncated: 7 more bytes]\n") {
		t.Errorf("run = %+v, want exit 3, invalid bytes as \\xNN, the cut marked", got)
	}
}

// TestShellNeedsARunningSandbox: only open starts the workspace's
// sandbox; a request on a workspace without one finds no session.
func TestShellNeedsARunningSandbox(t *testing.T) {
	w, _, _ := shellWorker(t)
	for _, op := range []string{workspaces.ShellRun, workspaces.ShellInterrupt, workspaces.ShellClose} {
		req := workspaces.ShellRequest{Op: op, Session: "s", Command: "true"}
		res := w.doShell(t.Context(), workspaces.Op{Workspace: workspaces.Workspace{ID: "ws_other"}, Shell: &req})
		if res.Shell == nil || !res.Shell.Missing || res.Error != "" {
			t.Errorf("%s on a workspace with no sandbox = %+v, want Missing", op, res)
		}
	}
	if len(w.opBoxes) != 1 {
		t.Errorf("a request started a sandbox: %d boxes", len(w.opBoxes))
	}
}

// TestExpireShells: sessions idle past ShellIdle are closed; the others
// keep the sandbox until they could expire.
func TestExpireShells(t *testing.T) {
	w, box, ob := shellWorker(t)
	box.open["old"], box.open["new"] = true, true
	ob.shells["old"] = &shellUse{last: time.Now().Add(-2 * time.Minute)}
	ob.shells["new"] = &shellUse{last: time.Now().Add(-10 * time.Second)}
	next := w.expireShells(ob)
	if next <= 0 || next > 50*time.Second {
		t.Errorf("next expiry in %v, want about 50s", next)
	}
	if len(box.closed) != 1 || box.closed[0] != "old" || ob.shells["old"] != nil || ob.shells["new"] == nil {
		t.Errorf("closed %v, kept %v, want the old one closed", box.closed, ob.shellNames())
	}
	ob.shells["new"].last = time.Now().Add(-time.Hour)
	if next := w.expireShells(ob); next != 0 || len(ob.shells) != 0 {
		t.Errorf("after the last expired: next %v, %d left", next, len(ob.shells))
	}
}

func TestBackslashReplace(t *testing.T) {
	for in, want := range map[string]string{"plain ü": "plain ü", "a\xffb": `a\xffb`, "\xe2\x82": `\xe2\x82`, "ok\xc3\xa9\x80": "ok\u00e9\\x80"} {
		if got := BackslashReplace([]byte(in)); got != want {
			t.Errorf("BackslashReplace(%q) = %q, want %q", in, got, want)
		}
	}
}
