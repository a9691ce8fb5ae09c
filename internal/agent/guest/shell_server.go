package guest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/agent"
	"github.com/helmr/helmr/internal/sandbox"
)

// DefaultShellRoot is where the agent keeps its shell sessions' files: a
// directory per session, named by its secret, that only the agent writes
// (the files in it are the session user's, 0600, for its shell to read).
const DefaultShellRoot = "/run/helmr-shells"

// Shell defaults and bounds.
const (
	defaultShellOutput      = 1 << 20
	defaultOpenTimeout      = 30 * time.Second
	defaultInterruptTry     = time.Second
	defaultInterruptRetries = 3
	syntaxCheckTimeout      = 10 * time.Second
	syntaxOutputMax         = 64 << 10
)

// errShellRequest marks a malformed shell request.
var errShellRequest = errors.New("invalid shell request")

func errNoSession(name string) error {
	return fmt.Errorf("shell session %q: %w", name, sandbox.ErrNoShell)
}

// handleShell serves m on its own goroutine and answers it.
func (s *Server) handleShell(m *agent.Shell) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		res, err := s.shell(m)
		if err != nil {
			res = &agent.ShellResult{Error: err.Error()}
			switch {
			case errors.Is(err, sandbox.ErrNoShell):
				res.ErrorCode = agent.ShellNoSession
			case errors.Is(err, sandbox.ErrShellExists):
				res.ErrorCode = agent.ShellExists
			case errors.Is(err, errShellRequest):
				res.ErrorCode = agent.ShellInvalid
			}
		}
		res.ID = m.ID
		s.send(res)
	}()
}

func (s *Server) shell(m *agent.Shell) (*agent.ShellResult, error) {
	req := sandbox.ShellRequest{Op: m.Op, Name: m.Name, Timeout: time.Duration(m.Timeout), Retries: m.Retries,
		MaxOutput: m.MaxOutput, StartupSource: m.StartupSource, Cwd: m.Cwd}
	if err := agent.ValidateShell(req); err != nil {
		return nil, fmt.Errorf("%w: %w", errShellRequest, err)
	}
	maxOut := m.MaxOutput
	if maxOut == 0 {
		maxOut = defaultShellOutput
	}
	if m.Op == sandbox.ShellOpen {
		return s.openShell(m, maxOut)
	}
	sess := s.lookupShell(m.Name)
	if sess == nil {
		return nil, errNoSession(m.Name)
	}
	switch m.Op {
	case sandbox.ShellRun:
		if res, err := s.checkSyntax(sess, m.Command); res != nil || err != nil {
			return res, err
		}
		j := newJob(m.Command, maxOut)
		if err := sess.enqueue(j); err != nil {
			return nil, err
		}
		return sess.await(j, time.Duration(m.Timeout))
	case sandbox.ShellInterrupt:
		try, retries := time.Duration(m.Timeout), m.Retries
		if try == 0 {
			try = defaultInterruptTry
		}
		if retries == 0 {
			retries = defaultInterruptRetries
		}
		return sess.interrupt(try, retries), nil
	default: // close
		sess.close()
		return &agent.ShellResult{}, nil
	}
}

func (s *Server) lookupShell(name string) *shellSession {
	s.shellMu.Lock()
	defer s.shellMu.Unlock()
	return s.shells[name]
}

// dropShell forgets sess once it has ended.
func (s *Server) dropShell(sess *shellSession) {
	s.shellMu.Lock()
	defer s.shellMu.Unlock()
	if s.shells[sess.name] == sess {
		delete(s.shells, sess.name)
	}
}

// closeShells ends every session (the worker has gone).
func (s *Server) closeShells() {
	s.shellMu.Lock()
	all := make([]*shellSession, 0, len(s.shells))
	for _, sess := range s.shells {
		all = append(all, sess)
	}
	s.shellMu.Unlock()
	for _, sess := range all {
		sess.close()
	}
}

// openShell starts session m.Name and waits up to m.Timeout (0: 30 s)
// for its first prompt. A startup still running then goes on, like a
// timed-out run: the answer is TimedOut, and the session exists.
func (s *Server) openShell(m *agent.Shell, maxOut int) (*agent.ShellResult, error) {
	s.shellMu.Lock()
	if _, ok := s.shells[m.Name]; ok {
		s.shellMu.Unlock()
		return nil, fmt.Errorf("shell session %q: %w", m.Name, sandbox.ErrShellExists)
	}
	sess, startup, err := s.startShell(m, maxOut)
	if err != nil {
		s.shellMu.Unlock()
		return nil, err
	}
	s.shells[m.Name] = sess
	s.shellMu.Unlock()
	timeout := time.Duration(m.Timeout)
	if timeout == 0 {
		timeout = defaultOpenTimeout
	}
	return sess.await(startup, timeout)
}

// startShell starts session m.Name; its startup is the job it returns.
func (s *Server) startShell(m *agent.Shell, maxOut int) (*shellSession, *shellJob, error) {
	cwd := m.Cwd
	if cwd == "" {
		cwd = "/"
	}
	env := m.Env
	if env == nil {
		env = []string{}
	}
	bash, err := lookPath("bash", env, cwd)
	if err != nil {
		return nil, nil, fmt.Errorf("start shell: %w", err)
	}
	secret, err := randomHex(16)
	if err != nil {
		return nil, nil, err
	}
	root := s.shellRoot
	if root == "" {
		root = DefaultShellRoot
	}
	dir := filepath.Join(root, secret)
	if err := os.MkdirAll(root, 0o711); err != nil {
		return nil, nil, fmt.Errorf("start shell: %w", err)
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, nil, fmt.Errorf("start shell: %w", err)
	}
	sess := &shellSession{
		srv: s, name: m.Name, uid: m.UID, gid: m.GID, env: env, dir: dir,
		typed:   []byte(`\builtin source ` + dir + "/cmd\n"),
		done:    make(chan struct{}),
		pending: capBuf{max: defaultShellOutput},
		changed: make(chan struct{}),
	}
	sess.scan = promptScanner{secret: []byte(secret), out: sess.emitLocked, prompt: sess.promptLocked}
	if err := sess.spawn(bash, cwd, rcFile(secret, m.StartupSource)); err != nil {
		_ = os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("start shell: %w", err)
	}
	startup := newJob("", maxOut)
	startup.open, startup.typed = true, true
	sess.cur = startup
	readerDone := make(chan struct{})
	s.wg.Add(2)
	go sess.read(readerDone)
	go sess.watch(readerDone)
	go sess.typist()
	return sess, startup, nil
}

// spawn starts bash on a new terminal as the session's user, leader of a
// session of its own whose controlling terminal it is.
func (sess *shellSession) spawn(bash, cwd string, rc []byte) error {
	rcPath := sess.dir + "/rc"
	if err := writeOwned(rcPath, rc, sess.uid, sess.gid); err != nil {
		return err
	}
	ptm, pts, err := openPTY(sess.uid)
	if err != nil {
		return err
	}
	defer pts.Close()
	attr := &os.ProcAttr{
		Dir:   cwd,
		Env:   sess.env,
		Files: []*os.File{pts, pts, pts},
		Sys: &syscall.SysProcAttr{
			Setsid: true, Setctty: true, Ctty: 0,
			Credential: &syscall.Credential{Uid: sess.uid, Gid: sess.gid, Groups: []uint32{}},
		},
	}
	argv := []string{"bash", "--noediting", "--rcfile", rcPath, "-i"}
	pid, wait, err := sess.srv.spawn(bash, argv, attr)
	if err != nil {
		_ = ptm.Close()
		return err
	}
	sess.ptm, sess.pid, sess.wait = ptm, pid, wait
	return nil
}

// rcFile is the session's bash startup file: Helmr's prompt first (so
// that a startup cut short by ^C still prompts), then what an interactive
// bash reads by default (~/.bashrc; the system bashrc bash reads itself),
// each startup file sourced as SWE-ReX types it (`source PATH`, so a
// missing one prints bash's error and the rest goes on), and the prompt
// once more, unexported.
func rcFile(secret string, startup []string) []byte {
	set := "PS1='" + secret + `#\#:$?#'` // as a command
	dq := "PS1='" + secret + `#\#:\$?#'` // the same, inside double quotes
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nPS2=''\nPS0=''\nPROMPT_COMMAND=\"%s\"\n", set, dq)
	b.WriteString("if [ -f ~/.bashrc ]; then \\builtin source ~/.bashrc; fi\n")
	for _, p := range startup {
		fmt.Fprintf(&b, "source %s\n", p)
	}
	// Keep a PROMPT_COMMAND the startup set, with Helmr's last.
	fmt.Fprintf(&b, "%s\nPS2=''\nPS0=''\nPROMPT_COMMAND=\"${PROMPT_COMMAND//\"%s\"/}\"\n", set, dq)
	fmt.Fprintf(&b, "PROMPT_COMMAND=\"${PROMPT_COMMAND:+$PROMPT_COMMAND$'\\n'}%s\"\n", dq)
	b.WriteString("\\builtin export -n PS1 PS2 PS0 PROMPT_COMMAND\n")
	return b.Bytes()
}

// writeOwned replaces path (in a directory only the agent writes) with a
// new file holding data, owned by uid:gid, mode 0600.
func writeOwned(path string, data []byte, uid, gid uint32) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if err := f.Chown(int(uid), int(gid)); err != nil && werr == nil {
		werr = err
	}
	if err := f.Close(); err != nil && werr == nil {
		werr = err
	}
	return werr
}

// checkSyntax runs `bash -n` as the session's user with command on its
// stdin, as SWE-ReX does before it runs a command; a command that does
// not parse gets its answer here (SyntaxError, with bash's exit status,
// stdout and stderr).
func (s *Server) checkSyntax(sess *shellSession, command string) (*agent.ShellResult, error) {
	bash, err := lookPath("bash", sess.env, "/")
	if err != nil {
		return nil, fmt.Errorf("syntax check: %w", err)
	}
	stdout, stderr, code, err := s.runCaptured(bash, []string{"bash", "-n"}, sess.env, sess.uid, sess.gid, []byte(command+"\n"))
	if err != nil {
		return nil, fmt.Errorf("syntax check: %w", err)
	}
	if code == 0 {
		return nil, nil
	}
	return &agent.ShellResult{SyntaxError: true, ExitCode: code, Output: stdout, SyntaxStderr: string(stderr)}, nil
}

// runCaptured runs a short helper process as uid:gid in / with stdin,
// and returns its output (each stream up to syntaxOutputMax) and status.
// It is killed after syntaxCheckTimeout.
func (s *Server) runCaptured(path string, argv, env []string, uid, gid uint32, stdin []byte) (stdout, stderr []byte, code int, err error) {
	pio, err := newProcIO(true, false)
	if err != nil {
		return nil, nil, 0, err
	}
	defer pio.closeOurs()
	attr := &os.ProcAttr{
		Dir: "/", Env: env, Files: pio.childFiles(),
		Sys: &syscall.SysProcAttr{Setpgid: true, Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}},
	}
	pid, wait, err := s.spawn(path, argv, attr)
	pio.closeChild()
	if err != nil {
		return nil, nil, 0, err
	}
	go func() {
		_, _ = pio.stdinW.Write(stdin)
		_ = pio.stdinW.Close()
	}()
	outc, errc := make(chan []byte, 1), make(chan []byte, 1)
	go func() { outc <- readCapped(pio.stdout, syntaxOutputMax) }()
	go func() { errc <- readCapped(pio.stderr, syntaxOutputMax) }()
	timer := time.NewTimer(syntaxCheckTimeout)
	defer timer.Stop()
	var ws unix.WaitStatus
	select {
	case ws = <-wait:
	case <-timer.C:
		_ = unix.Kill(-pid, unix.SIGKILL)
		ws = <-wait
	}
	grace := time.NewTimer(outputGrace)
	defer grace.Stop()
	for got := 0; got < 2; {
		select {
		case stdout = <-outc:
			got++
		case stderr = <-errc:
			got++
		case <-grace.C:
			pio.closeReaders() // a background child holds the pipes
		}
	}
	if ws.Signaled() {
		return stdout, stderr, 0, fmt.Errorf("%s killed by %s", argv[0], ws.Signal())
	}
	return stdout, stderr, ws.ExitStatus(), nil
}

// readCapped reads r to its end, keeping the first max bytes.
func readCapped(r io.Reader, max int) []byte {
	var b bytes.Buffer
	_, _ = io.Copy(&b, io.LimitReader(r, int64(max)))
	_, _ = io.Copy(io.Discard, r)
	return b.Bytes()
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random: %w", err)
	}
	return hex.EncodeToString(b), nil
}
