package worker

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/helmr/helmr/internal/runs"
)

// recordingControl records log batches; other methods are unused here.
type recordingControl struct {
	ControlPlane
	mu    sync.Mutex
	lines []runs.LogData
}

func (c *recordingControl) Logs(_ context.Context, _ string, lines []runs.LogData, _ time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, lines...)
	return nil
}

func TestLogSinkSplitsLines(t *testing.T) {
	cp := &recordingControl{}
	s := newLogSink(cp, "run_1", slog.Default())
	s.Write("stdout", []byte("one\ntw"))
	s.Write("stderr", []byte("err line\r\n"))
	s.Write("stdout", []byte("o\nthree"))
	s.Write("stdout", []byte(strings.Repeat("x", maxLineBytes+5)))
	s.Close()
	s.Write("stdout", []byte("after close\n"))
	want := []runs.LogData{
		{Stream: "stdout", Line: "one"},
		{Stream: "stderr", Line: "err line"},
		{Stream: "stdout", Line: "two"},
		{Stream: "stdout", Line: "three" + strings.Repeat("x", maxLineBytes-5)},
		{Stream: "stdout", Line: strings.Repeat("x", 10)},
	}
	if diff := cmp.Diff(want, cp.lines); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
	if got := s.Tail(); len(got) != 1 || got[0] != "err line" {
		t.Errorf("Tail() = %q, want the stderr line", got)
	}
}

func TestLogSinkKeepsOrderUnderLoad(t *testing.T) {
	cp := &recordingControl{}
	s := newLogSink(cp, "run_1", slog.Default())
	for i := 0; i < 5000; i++ {
		s.Write("stdout", []byte{byte('a' + i%26), '\n'})
	}
	s.Close()
	if len(cp.lines) != 5000 {
		t.Fatalf("got %d lines, want 5000", len(cp.lines))
	}
	for i, l := range cp.lines {
		if l.Line != string(rune('a'+i%26)) {
			t.Fatalf("line %d = %q, want %q", i, l.Line, string(rune('a'+i%26)))
		}
	}
}
