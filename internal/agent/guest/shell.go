package guest

import (
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent"
)

// A shell session is an interactive bash on a pseudo-terminal of its own,
// held by the agent between requests, so that everything a shell keeps
// carries from one command to the next as when a person types them.
//
// How a command runs: the agent writes it to a file of the session's
// (cmdFile) and types one short line, `\builtin source FILE`, so that the
// command is read whole, however many lines it has and whatever it holds
// (an unterminated heredoc ends at the end of the file, with bash's own
// warning), and errors read "bash: ..." as for typed lines (bash names an
// interactive shell, not the file, in its messages). Its end is the next
// prompt: PS1 is secret#\#:$?# (a PROMPT_COMMAND re-asserts it, should a
// command or a sourced rc file set another), which carries the command's
// exit status and bash's command number; bash prints it after every line
// it reads, also when ^C aborted one, so neither the output's size nor its
// content can hide or fake an end. The command number tells the prompt of
// the typed line from one that ^C printed at an idle prompt (which keeps
// the number). Differences from typing the command itself: `return` at its
// top level returns from the source rather than failing, $LINENO and
// BASH_SOURCE see the file, a job started with & prints no "[1] PID" line,
// and under set -x trace lines nest one level deeper (++).
type shellSession struct {
	srv   *Server
	name  string
	uid   uint32
	gid   uint32
	env   []string
	dir   string // the session's files: rc, cmd
	typed []byte // the line that runs cmd
	ptm   *os.File
	pid   int
	wait  <-chan unix.WaitStatus
	done  chan struct{} // closed once the session has ended
	intr  sync.Mutex    // one interrupt at a time

	mu           sync.Mutex
	scan         promptScanner
	filter       textFilter
	queue        []*shellJob // requests waiting for the shell
	cur          *shellJob   // the job whose line was typed; its prompt is due
	lastNum      int         // command number of the last prompt
	pending      capBuf      // output that no waiting request claims
	interrupting bool        // an interrupt acts: type nothing
	closing      bool
	ended        bool
	changed      chan struct{} // closed and replaced on every change
}

// shellJob is one command (or the startup) of a session.
type shellJob struct {
	command string
	open    bool // the startup: ends with the first prompt
	out     capBuf
	done    chan struct{} // closed once finished

	typed     bool // its line is on the terminal
	abandoned bool // its request stopped waiting (timed out)
	hit       bool // an interrupt's ^C came after its line
	finished  bool
	code      int
	exited    bool  // the shell ended before its prompt
	err       error // it could not be typed (gone: the session ended first)
}

func newJob(command string, maxOutput int) *shellJob {
	return &shellJob{command: command, out: capBuf{max: maxOutput}, done: make(chan struct{})}
}

func (j *shellJob) finishLocked(code int) {
	if j.finished {
		return
	}
	j.finished, j.code = true, code
	close(j.done)
}

// resultLocked is a finished job's answer.
func (j *shellJob) resultLocked() *agent.ShellResult {
	out, cut := j.out.take()
	return &agent.ShellResult{Output: out, OutputCut: cut, ExitCode: j.code, Exited: j.exited}
}

func (s *shellSession) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitLocked releases s.mu until the session changes or stop fires, and
// reports whether it changed.
func (s *shellSession) waitLocked(stop <-chan time.Time) bool {
	ch := s.changed
	s.mu.Unlock()
	defer s.mu.Lock()
	select {
	case <-ch:
		return true
	case <-stop:
		return false
	}
}

// sinkLocked is where output goes now: the job that runs, unless its
// request gave up on it, else the session's pending output.
func (s *shellSession) sinkLocked() *capBuf {
	if s.cur != nil && !s.cur.abandoned {
		return &s.cur.out
	}
	return &s.pending
}

func (s *shellSession) emitLocked(b []byte) {
	s.filter.write(b, s.sinkLocked().write)
}

// promptLocked ends the typed job, unless the prompt is one that ^C
// printed at an idle shell (same command number, and the job's line came
// after the ^C, so it still waits to be read).
func (s *shellSession) promptLocked(num, code int) {
	s.filter.flush(s.sinkLocked().write)
	j := s.cur
	if j != nil && !j.open && num == s.lastNum && !j.hit {
		return
	}
	s.lastNum = num
	if j != nil {
		s.cur = nil
		j.finishLocked(code)
		s.broadcastLocked()
	}
}

// read feeds the terminal's output to the scanner until the terminal has
// no writer left (EIO) or the master is closed.
func (s *shellSession) read(readerDone chan<- struct{}) {
	defer close(readerDone)
	buf := make([]byte, 32<<10)
	for {
		n, err := s.ptm.Read(buf)
		if n > 0 {
			s.mu.Lock()
			s.scan.write(buf[:n])
			s.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// typist types the next queued job's line whenever the shell is at its
// prompt and no interrupt acts.
func (s *shellSession) typist() {
	defer s.srv.wg.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for !s.ended && !s.closing && (s.cur != nil || s.interrupting || len(s.queue) == 0) {
			s.waitLocked(nil)
		}
		if s.ended || s.closing {
			return
		}
		j := s.queue[0]
		s.queue = s.queue[1:]
		if err := writeOwned(s.dir+"/cmd", []byte(j.command), s.uid, s.gid); err != nil {
			j.err = err
			j.finishLocked(0)
			continue
		}
		j.typed = true
		if !j.abandoned { // else its output, and what came before, stay pending
			j.out.absorb(&s.pending)
		}
		s.cur = j
		s.mu.Unlock()
		if err := setTerminalModes(s.ptm); err != nil {
			s.srv.log.Debug("shell terminal modes", "session", s.name, "err", err)
		}
		if _, err := s.ptm.Write(s.typed); err != nil {
			s.srv.log.Debug("shell type", "session", s.name, "err", err)
		}
		s.mu.Lock()
	}
}

// watch waits for the shell to exit, then kills what is left of its
// session, drains the terminal and ends the session: the job that ran
// ends Exited with the shell's status, queued ones find no session.
func (s *shellSession) watch(readerDone <-chan struct{}) {
	defer s.srv.wg.Done()
	ws := <-s.wait
	killSession(s.pid)
	timer := time.NewTimer(outputGrace)
	select {
	case <-readerDone:
	case <-timer.C: // a process that left the session holds the terminal
		_ = s.ptm.SetReadDeadline(time.Now())
		<-readerDone
	}
	timer.Stop()
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	// Forget the session before answering, so that a request after the
	// answer finds no session and no files.
	s.srv.dropShell(s)
	_ = s.ptm.Close()
	if err := os.RemoveAll(s.dir); err != nil {
		s.srv.log.Warn("remove shell session files", "session", s.name, "err", err)
	}
	s.mu.Lock()
	s.scan.finish()
	s.filter.flush(s.sinkLocked().write)
	s.ended = true
	if j := s.cur; j != nil {
		s.cur = nil
		j.exited = true
		j.finishLocked(code)
	}
	for _, j := range s.queue {
		j.err = errNoSession(s.name)
		j.finishLocked(0)
	}
	s.queue = nil
	s.broadcastLocked()
	s.mu.Unlock()
	close(s.done)
}

// enqueue adds j to the jobs waiting for the shell.
func (s *shellSession) enqueue(j *shellJob) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.closing {
		return errNoSession(s.name)
	}
	s.queue = append(s.queue, j)
	s.broadcastLocked()
	return nil
}

// await waits up to timeout (0: no bound) for j. A job still running
// then is abandoned: its answer is what it printed so far, TimedOut, and
// what it prints later is pending output (for an interrupt, or the next
// command); a job still queued stays queued, as typed-ahead input.
func (s *shellSession) await(j *shellJob, timeout time.Duration) (*agent.ShellResult, error) {
	var stop <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		stop = t.C
	}
	select {
	case <-j.done:
	case <-stop:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.finished {
		if j.err != nil {
			return nil, j.err
		}
		return j.resultLocked(), nil
	}
	if j.typed {
		s.scan.flushPartial()
	}
	j.abandoned = true
	out, cut := j.out.take()
	return &agent.ShellResult{Output: out, OutputCut: cut, TimedOut: true}, nil
}

// interrupt ends the command that runs as SWE-ReX does: ^C up to retries
// times, each followed by up to try for its prompt; then ^Z, and the
// stopped job's process group killed (upstream types kill -9 %1, which
// the agent does directly). Queued commands whose requests gave up are
// dropped (as ^C discards typed-ahead input); those still awaited run.
// The answer carries the pending output (what the command printed since
// its run gave up on it) and the command's status; TimedOut if the shell
// did not come back to its prompt.
func (s *shellSession) interrupt(try time.Duration, retries int) *agent.ShellResult {
	s.intr.Lock()
	defer s.intr.Unlock()
	s.mu.Lock()
	kept := s.queue[:0]
	for _, q := range s.queue {
		if !q.abandoned {
			kept = append(kept, q)
		}
	}
	s.queue = kept
	j := s.cur
	if j == nil || s.ended {
		defer s.mu.Unlock()
		out, cut := s.pending.take()
		return &agent.ShellResult{Output: out, OutputCut: cut}
	}
	s.interrupting = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.interrupting = false
		s.broadcastLocked()
		s.mu.Unlock()
	}()

	ok := false
	for i := 0; i < retries && !ok; i++ {
		s.key(j, 3) // ^C
		ok = s.waitJob(j, try)
	}
	if !ok {
		if pg, err := foregroundGroup(s.ptm); err == nil && pg > 0 && pg != s.pid {
			s.key(j, 26) // ^Z: the job stops and the shell prompts
			ok = s.waitJob(j, try)
			_ = unix.Kill(-pg, unix.SIGKILL)
			_ = unix.Kill(-pg, unix.SIGCONT)
			if !ok {
				ok = s.waitJob(j, try)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if j.typed && !ok {
		s.scan.flushPartial()
	}
	out, cut := s.pending.take()
	return &agent.ShellResult{Output: out, OutputCut: cut, ExitCode: j.code, TimedOut: !ok, Exited: j.exited}
}

// key writes a control character to the terminal if j still runs.
func (s *shellSession) key(j *shellJob, c byte) {
	s.mu.Lock()
	if s.cur != j || s.ended {
		s.mu.Unlock()
		return
	}
	j.hit = true
	s.mu.Unlock()
	if _, err := s.ptm.Write([]byte{c}); err != nil {
		s.srv.log.Debug("shell key", "session", s.name, "err", err)
	}
}

// waitJob waits up to d for j to finish.
func (s *shellSession) waitJob(j *shellJob, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-j.done:
		return true
	case <-t.C:
		return false
	}
}

// close kills the shell and everything of its session and waits for the
// session to end.
func (s *shellSession) close() {
	s.mu.Lock()
	s.closing = true
	s.broadcastLocked()
	s.mu.Unlock()
	killSession(s.pid)
	<-s.done
}
