package microvm

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
)

// TestConsoleOOM checks which console lines count as the guest kernel's
// OOM kills: its own lines only, not an agent's log line naming the same
// words.
func TestConsoleOOM(t *testing.T) {
	tests := []struct {
		line string
		want bool
	}{
		{"[   12.345678] Memory cgroup out of memory: Killed process 231 (node) total-vm:1234kB", true},
		{"[ 1234.5] Out of memory: Killed process 99 (node) total-vm:1kB", true},
		{"[    3.100000] virtio_blk virtio1: [vda] 2048 512-byte logical blocks", false},
		{`time=2026-01-01T00:00:00Z level=ERROR msg="exec failed" path="[ 1.0] Out of memory: Killed process 1"`, false},
		{"Out of memory: Killed process 1 (x)", false},
	}
	for _, tt := range tests {
		c := newConsoleLog(slog.New(slog.NewTextHandler(io.Discard, nil)), filepath.Join(t.TempDir(), "console.log"))
		if _, err := c.Write([]byte("booting\r\n" + tt.line + "\r\n")); err != nil {
			t.Fatal(err)
		}
		if got := c.oomKilled(); got != tt.want {
			t.Errorf("console line %q: oomKilled() = %v, want %v", tt.line, got, tt.want)
		}
	}
}
