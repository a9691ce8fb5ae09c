package worker

import (
	"strconv"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/workspaces"
)

// TestCappedNeverCutsASecret floods a stream so that the output limit
// falls inside a secret's value: what is kept ends before it, so nothing
// of it is left for redaction to miss.
func TestCappedNeverCutsASecret(t *testing.T) {
	const value = "tok-0123456789abcdef"
	secrets := map[string]string{"TOKEN": value}
	for _, at := range []int{workspaces.MaxOutputBytes - 1, workspaces.MaxOutputBytes - 10, workspaces.MaxOutputBytes - len(value) + 1} {
		c := capped{hold: workspaces.Lookahead(secrets)}
		c.write([]byte(strings.Repeat("a", at)))
		c.write([]byte(value + strings.Repeat("b", 100)))
		out := workspaces.Redact(c.String(secrets), secrets)
		if !c.truncated() || strings.Contains(out, "tok-") || !strings.Contains(out, "[helmr: output truncated: "+strconv.Itoa(len(value)+100)+" more bytes]") {
			t.Errorf("limit %d bytes into the value: truncated %v, tail %q", workspaces.MaxOutputBytes-at, c.truncated(), out[max(0, len(out)-80):])
		}
	}
	// Without secrets: cut at the limit exactly.
	c := capped{}
	c.write([]byte(strings.Repeat("a", workspaces.MaxOutputBytes+5)))
	if out := c.String(nil); !strings.HasSuffix(out, "a\n[helmr: output truncated: 5 more bytes]\n") || len(out) != workspaces.MaxOutputBytes+len("\n[helmr: output truncated: 5 more bytes]\n") {
		t.Errorf("plain cut: %d bytes, tail %q", len(out), out[len(out)-60:])
	}
	// Under the limit: as is.
	c = capped{hold: 4}
	c.write([]byte("short"))
	if c.truncated() || c.String(secrets) != "short" {
		t.Errorf("short output = %q, truncated %v", c.String(secrets), c.truncated())
	}
}

// TestOpLinesNeverCutsASecret streams one line far longer than a piece,
// with a secret at every offset around the piece size: every piece sent,
// once redacted, holds no part of the value.
func TestOpLinesNeverCutsASecret(t *testing.T) {
	const value = "tok-0123456789abcdef"
	secrets := map[string]string{"TOKEN": value}
	for off := 16<<10 - len(value); off <= 16<<10+1; off++ {
		var sent []string
		l := &opLines{secrets: secrets, send: func(_, data string) { sent = append(sent, workspaces.Redact(data, secrets)) }}
		line := strings.Repeat("a", off) + value + strings.Repeat("b", 20<<10) + "\n"
		for p := line; p != ""; p = p[min(len(p), 999):] {
			l.write("stdout", []byte(p[:min(len(p), 999)]))
		}
		l.flush()
		joined := strings.Join(sent, "")
		for _, s := range sent {
			if strings.Contains(s, "tok-") {
				t.Fatalf("value at %d: a piece holds part of it: %q", off, s[max(0, strings.Index(s, "tok-")-5):])
			}
		}
		if want := strings.Repeat("a", off) + "[redacted:TOKEN]" + strings.Repeat("b", 20<<10) + "\n"; joined != want {
			t.Fatalf("value at %d: the pieces do not add up to the redacted line (%d bytes, want %d)", off, len(joined), len(want))
		}
	}
}
