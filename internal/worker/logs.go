package worker

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/runs"
)

const (
	maxLineBytes  = 64 << 10
	flushEvery    = 250 * time.Millisecond
	maxBatch      = 1000
	tailLines     = 20
	logSendTimout = 10 * time.Second
)

// logSink turns output chunks into log lines and sends them to the control
// plane in batches, in order. Close flushes everything.
type logSink struct {
	cp    ControlPlane
	runID string
	log   *slog.Logger

	// redact, if set before the first Write, scrubs secret values from
	// every line.
	redact *redactor

	mu      sync.Mutex
	partial map[string][]byte
	pending []runs.LogData
	tail    []string
	closed  bool

	kick   chan struct{}
	done   chan struct{}
	exited chan struct{}
	once   sync.Once
}

func newLogSink(cp ControlPlane, runID string, log *slog.Logger) *logSink {
	s := &logSink{cp: cp, runID: runID, log: log, partial: map[string][]byte{},
		kick: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
	go s.loop()
	return s
}

// Write accepts a chunk of a stream's output.
func (s *logSink) Write(stream string, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	buf := append(s.partial[stream], data...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		s.addLocked(stream, string(bytes.TrimSuffix(buf[:i], []byte("\r"))))
		buf = buf[i+1:]
	}
	for len(buf) >= maxLineBytes {
		s.addLocked(stream, string(buf[:maxLineBytes]))
		buf = buf[maxLineBytes:]
	}
	s.partial[stream] = append([]byte(nil), buf...)
	if len(s.pending) > 0 {
		// Group commit: the loop sends what accumulated while the previous
		// batch was in flight, so the first line goes out at once and busy
		// output still travels in batches.
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

func (s *logSink) addLocked(stream, line string) {
	line = s.redact.String(line)
	s.pending = append(s.pending, runs.LogData{Stream: stream, Line: line})
	if stream == "stderr" {
		s.tail = append(s.tail, line)
		if len(s.tail) > tailLines {
			s.tail = s.tail[1:]
		}
	}
}

// Tail returns the last stderr lines.
func (s *logSink) Tail() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.tail...)
}

func (s *logSink) loop() {
	defer close(s.exited)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.kick:
		case <-s.done:
			s.flush()
			return
		}
		s.flush()
	}
}

// flush sends pending lines in batches of at most maxBatch.
func (s *logSink) flush() {
	for {
		s.mu.Lock()
		batch := s.pending
		if len(batch) > maxBatch {
			batch = batch[:maxBatch]
		}
		s.pending = s.pending[len(batch):]
		s.mu.Unlock()
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), logSendTimout)
		err := s.cp.Logs(ctx, s.runID, batch, time.Now().UTC())
		cancel()
		if err != nil {
			s.log.Warn("send logs failed", "run_id", s.runID, "lines", len(batch), "err", err)
		}
	}
}

// Close flushes partial lines and pending batches; safe to call twice.
func (s *logSink) Close() {
	s.once.Do(func() {
		s.mu.Lock()
		for stream, p := range s.partial {
			if len(p) > 0 {
				s.addLocked(stream, string(p))
			}
		}
		s.closed = true
		s.mu.Unlock()
		close(s.done)
	})
	<-s.exited
}
