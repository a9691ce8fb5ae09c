package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/workspaces"
)

// TestTerminal opens a terminal in a workspace of a real helmr dev on
// gVisor and drives it as the console does: keys posted, output read
// from the event stream, a resize the shell sees, and close.
func TestTerminal(t *testing.T) {
	d := startDev(t, "gvisor")
	d.deploy("internal/e2e/testdata/workspace")
	var ws workspaces.Workspace
	if err := json.Unmarshal([]byte(d.mustHelmr("workspace", "create", "notes", "--project", "workspace", "--json")), &ws); err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, d.url+path, strings.NewReader(body))
		resp := d.do(req)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	base := "/v1/workspaces/" + ws.ID + "/terminals"
	st, body := call("POST", base, `{"cols": 80, "rows": 24}`)
	var term workspaces.Terminal
	if st != http.StatusCreated || json.Unmarshal(body, &term) != nil || term.ID == "" {
		t.Fatalf("POST %s = %d %s", base, st, body)
	}
	path := base + "/" + term.ID

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.url+path+"/output", nil)
	resp := d.do(req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET output = %d", resp.StatusCode)
	}
	defer resp.Body.Close()
	out := &termReader{sc: bufio.NewScanner(resp.Body)}

	typeIn := func(keys string) {
		t.Helper()
		if st, body := call("POST", path+"/input", keys); st != http.StatusNoContent {
			t.Fatalf("POST input %q = %d %s", keys, st, body)
		}
	}
	// The shell may still be starting: keys typed now wait for it.
	typeIn("echo hi\r")
	out.until(t, "hi") // the output, not the echo of the typed line
	typeIn("pwd; echo $TERM; test -t 0 && echo on-a-tty\r")
	out.until(t, "/workspace")
	out.until(t, "xterm-256color")
	out.until(t, "on-a-tty")

	if st, body := call("POST", path+"/resize", `{"cols": 100, "rows": 30}`); st != http.StatusNoContent {
		t.Fatalf("POST resize = %d %s", st, body)
	}
	typeIn("stty size\r")
	out.until(t, "30 100")

	if st, body := call("DELETE", path, ""); st != http.StatusNoContent {
		t.Fatalf("DELETE = %d %s", st, body)
	}
	end := out.end(t)
	if !end.Closed {
		t.Errorf("end = %+v, want closed", end)
	}
	// The sandbox goes on: an exec after the terminal works.
	if got := d.mustHelmr("exec", ws.ID, "--", "echo", "after"); got != "after\n" {
		t.Errorf("exec after the terminal = %q", got)
	}
}

// termReader reads a terminal's event stream.
type termReader struct {
	sc   *bufio.Scanner
	text strings.Builder
	seen int
}

// next returns the next event's name and data; ok false at the end.
func (r *termReader) next() (name, data string, ok bool) {
	for r.sc.Scan() {
		line := r.sc.Text()
		switch {
		case line == "" && name != "":
			return name, data, true
		case strings.HasPrefix(line, "event: "):
			name = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = line[6:]
		}
	}
	return "", "", false
}

// until reads output until what came since the last match holds line
// as a whole line (after a "\r" or "\n", before "\r\n"): a command's
// output, not the echo of the line that ran it.
func (r *termReader) until(t *testing.T, line string) {
	t.Helper()
	for {
		text := r.text.String()
		for i := r.seen; ; {
			j := strings.Index(text[i:], line+"\r\n")
			if j < 0 {
				break
			}
			at := i + j
			if at > 0 && (text[at-1] == '\r' || text[at-1] == '\n') {
				r.seen = at + len(line)
				return
			}
			i = at + 1
		}
		name, data, ok := r.next()
		if !ok || name != "output" {
			t.Fatalf("the stream ended (%s %s) before %q; output: %q", name, data, line, r.text.String())
		}
		var o struct{ Data []byte }
		if err := json.Unmarshal([]byte(data), &o); err != nil {
			t.Fatalf("output event %q: %v", data, err)
		}
		r.text.Write(o.Data)
	}
}

// end reads to the end event.
func (r *termReader) end(t *testing.T) workspaces.Terminal {
	t.Helper()
	for {
		name, data, ok := r.next()
		if !ok {
			t.Fatalf("the stream ended without an end event; output: %q", r.text.String())
		}
		if name == "end" {
			var term workspaces.Terminal
			if err := json.Unmarshal([]byte(data), &term); err != nil {
				t.Fatalf("end event %q: %v", data, err)
			}
			return term
		}
	}
}
