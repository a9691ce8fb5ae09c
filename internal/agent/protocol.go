// Package agent is the protocol between a worker and the guest agent
// (cmd/helmr-agent) that runs as the first process of every sandbox, and the
// worker-side Client that speaks it. The guest side lives in agent/guest.
//
// The protocol is a sequence of frames over one byte stream (a unix socket
// for the process tier; virtio-serial or vsock for VMs). A frame is a 4-byte
// big-endian length followed by a JSON object whose "type" field names the
// message. Frames larger than MaxFrameSize are rejected.
//
// Messages, by direction:
//
//	worker → agent: init, exec, stdin, message, signal, write_file, shell, resize
//	agent → worker: ready, fatal, started, output, message, exit, shell_result
//
// A session starts with init → ready|fatal (process tier) or with ready alone
// (tiers whose runtime set the guest up). Each exec carries a worker-chosen
// id; every later frame about that process carries the same id, and exit is
// the last of them.
//
// Shell sessions (sandbox.Shells) are held by the agent: a shell frame is
// one request on a named session (open, run, interrupt, close) and is
// answered by exactly one shell_result frame with the same id, when the
// request is done. Requests on one session are served one at a time in the
// order they arrive, except interrupt, which acts on the command that runs;
// requests on different sessions, and execs, run side by side. A request
// the worker stops waiting for still completes in the guest (a run's
// command goes on in its session); its late answer carries an id the
// worker no longer knows and is dropped.
package agent

// Version is the agent's protocol version, sent in ready.
const Version = "helmr-agent/1"

// Message type names (the "type" field of a frame).
const (
	TypeInit    = "init"
	TypeReady   = "ready"
	TypeFatal   = "fatal"
	TypeExec    = "exec"
	TypeStarted = "started"
	TypeOutput  = "output"
	TypeMessage = "message"
	TypeStdin   = "stdin"
	TypeSignal  = "signal"
	TypeExit    = "exit"
	// TypeWriteFile places a file (a run's secret) in the sandbox; the
	// agent answers with an exit frame of the same id.
	TypeWriteFile = "write_file"
	// TypeShell is a request on a shell session; the agent answers with a
	// shell_result frame of the same id.
	TypeShell       = "shell"
	TypeShellResult = "shell_result"
	// TypeResize sets the window size of a terminal exec (Exec.TTY).
	TypeResize = "resize"
)

// Output stream names.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// MaxMessageLine bounds one channel message (a line on the process's fd 3);
// longer lines are dropped by the agent and refused by Sender.Send, so that a
// message always fits a frame after base64.
const MaxMessageLine = 8 << 20

// Msg is one protocol message.
type Msg interface {
	// MessageType is the frame's "type".
	MessageType() string
}

// Init is the setup a process-tier agent performs before it serves. Paths
// are as the agent sees them before it pivots (in a copy of the host's mount
// namespace). Root layers and the workspace and helmr sources are each a
// path or "fd:N", the N-th (from 0) descriptor sent with the init frame
// (SCM_RIGHTS, see Writer.SendFDs): a detached mount (open_tree) that the
// agent attaches. Overlayfs layers and bind sources must lie in the agent's
// own mount namespace, which a descriptor opened by the worker does not.
// The agent closes every descriptor it received once set up.
type Init struct {
	// StateDir is a directory the agent owns and can reach by path; it
	// mounts its scratch tmpfs (the runtime layer and the new root) in it.
	StateDir string `json:"state_dir"`
	// RootLayers are the read-only root filesystem layers, lowest first.
	RootLayers []string `json:"root_layers"`
	// RootSize, if positive, makes the root writable: a copy-on-write
	// layer over RootLayers on a tmpfs of this many bytes, gone with the
	// agent's mount namespace. 0 leaves the root read-only.
	RootSize int64 `json:"root_size,omitempty"`
	// Workspace is the in-guest workspace path; WorkspaceSource (a path or
	// "fd:N") is mounted read-write there.
	Workspace       string `json:"workspace"`
	WorkspaceSource string `json:"workspace_source"`
	// HelmrSource, if set, is bound read-only at /opt/helmr.
	HelmrSource string `json:"helmr_source,omitempty"`
	// HelmrWritable lets the agent's WriteFile place files under
	// /opt/helmr after setup, which stays read-only to the processes it
	// starts: /opt/helmr is then an overlay of HelmrSource and a tmpfs
	// that only the agent writes. For a runtime whose HelmrSource is a
	// copy the host cannot add to (a VM's disk) and that gets files
	// under /opt/helmr once the sandbox runs (a run's task).
	HelmrWritable bool     `json:"helmr_writable,omitempty"`
	Hostname      string   `json:"hostname"`
	DNS           []string `json:"dns,omitempty"`
	// MachineID, if set, is the sandbox's /etc/machine-id (32 lower-case
	// hex digits), read-only; unset, the image's stands.
	MachineID string `json:"machine_id,omitempty"`
	// CloseFDs are descriptors the agent inherited when it was started
	// (not those sent with init) that it closes once set up, before it
	// runs anything.
	CloseFDs []int `json:"close_fds,omitempty"`
}

// Ready says the guest is set up and the agent serves.
type Ready struct {
	Version string `json:"version"`
	// Binary says the agent reads binary Stdin frames (binframe.go).
	Binary bool `json:"binary,omitempty"`
}

// Fatal says setup failed; the agent exits after sending it.
type Fatal struct {
	Message string `json:"message"`
}

// Exec starts one process. Uid and Gid are in-guest ids. If Channel is set the
// process gets a socket on fd 3 carrying newline-delimited messages; if Stdin
// is set its stdin is a pipe fed by stdin frames, otherwise /dev/null.
//
// With TTY, the process instead leads a session of its own whose
// controlling terminal is a new pseudo-terminal of TTY's size, in its
// default modes (echo on): stdin, stdout and stderr are that terminal.
// Stdin frames are typed into it (their EOF is ignored: ^D is a byte like
// any other), everything the terminal prints comes as stdout output, and
// resize frames change its size. Channel still works; Stdin is implied.
type Exec struct {
	ID      uint64   `json:"id"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env,omitempty"`
	Cwd     string   `json:"cwd,omitempty"`
	UID     uint32   `json:"uid"`
	GID     uint32   `json:"gid"`
	Channel bool     `json:"channel,omitempty"`
	Stdin   bool     `json:"stdin,omitempty"`
	TTY     *WinSize `json:"tty,omitempty"`
}

// WinSize is a terminal's size in characters.
type WinSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Resize sets the size of exec ID's terminal (an Exec with TTY); the
// guest's kernel tells the terminal's foreground processes (SIGWINCH).
// A resize for a process without a terminal, or one gone, is ignored.
type Resize struct {
	ID uint64 `json:"id"`
	WinSize
}

// MessageType implements Msg.
func (*Resize) MessageType() string { return TypeResize }

// Started says the process of exec ID runs.
type Started struct {
	ID  uint64 `json:"id"`
	PID int    `json:"pid"`
}

// Output is a chunk of a process's stdout or stderr, sent as it arrives.
type Output struct {
	ID     uint64 `json:"id"`
	Stream string `json:"stream"`
	Data   []byte `json:"data"`
}

// ChannelMessage is one line of a process's fd-3 channel, without its
// newline, in either direction. Data is usually JSON but is carried as bytes
// (base64) so that a malformed line cannot break the stream.
type ChannelMessage struct {
	ID   uint64 `json:"id"`
	Data []byte `json:"data"`
}

// Stdin is a chunk of a process's stdin; EOF closes it.
type Stdin struct {
	ID   uint64 `json:"id"`
	Data []byte `json:"data,omitempty"`
	EOF  bool   `json:"eof,omitempty"`
}

// Signal sends a signal ("SIGTERM", "SIGKILL", ...) to the process group of
// exec ID.
type Signal struct {
	ID     uint64 `json:"id"`
	Signal string `json:"signal"`
}

// Exit is the last frame about exec ID. Error is set when the process could
// not be started (Code is then 127 or 126); Signal names a fatal signal
// ("killed").
type Exit struct {
	ID     uint64 `json:"id"`
	Code   int    `json:"code"`
	Signal string `json:"signal,omitempty"`
	Error  string `json:"error,omitempty"`
}

// MessageType implements Msg.
func (*Init) MessageType() string { return TypeInit }

// MessageType implements Msg.
func (*Ready) MessageType() string { return TypeReady }

// MessageType implements Msg.
func (*Fatal) MessageType() string { return TypeFatal }

// MessageType implements Msg.
func (*Exec) MessageType() string { return TypeExec }

// MessageType implements Msg.
func (*Started) MessageType() string { return TypeStarted }

// MessageType implements Msg.
func (*Output) MessageType() string { return TypeOutput }

// MessageType implements Msg.
func (*ChannelMessage) MessageType() string { return TypeMessage }

// MessageType implements Msg.
func (*Stdin) MessageType() string { return TypeStdin }

// MessageType implements Msg.
func (*Signal) MessageType() string { return TypeSignal }

// MessageType implements Msg.
func (*Exit) MessageType() string { return TypeExit }

// WriteFile asks the agent to create Path (absolute; no symlink on the way;
// missing parents made root-owned 0755) with Data, owned by UID:GID with
// Mode, replacing an earlier file of the same name. If ReaderUID is set the
// agent then checks that ReaderUID:ReaderGID can traverse to it and read
// it, and fails (leaving it in place) if not: permissions are never
// loosened to make a file readable. The answer is Exit (Code 0, or 1 with
// Error).
type WriteFile struct {
	ID        uint64  `json:"id"`
	Path      string  `json:"path"`
	Data      []byte  `json:"data"`
	Mode      uint32  `json:"mode"`
	UID       uint32  `json:"uid"`
	GID       uint32  `json:"gid"`
	Dir       bool    `json:"dir,omitempty"` // create a directory (Data unused)
	ReaderUID *uint32 `json:"reader_uid,omitempty"`
	ReaderGID uint32  `json:"reader_gid,omitempty"`
}

// MessageType implements Msg.
func (*WriteFile) MessageType() string { return TypeWriteFile }

// MaxShellOutput bounds Shell.MaxOutput, so that a result fits a frame
// after base64.
const MaxShellOutput = 8 << 20

// Shell is one request on a shell session; see sandbox.ShellRequest for
// the fields, which keep their meaning. Timeout is in nanoseconds.
type Shell struct {
	ID            uint64   `json:"id"`
	Op            string   `json:"op"`
	Name          string   `json:"name"`
	Env           []string `json:"env,omitempty"`
	Cwd           string   `json:"cwd,omitempty"`
	UID           uint32   `json:"uid,omitempty"`
	GID           uint32   `json:"gid,omitempty"`
	StartupSource []string `json:"startup_source,omitempty"`
	Command       string   `json:"command,omitempty"`
	Timeout       int64    `json:"timeout_ns,omitempty"`
	Retries       int      `json:"retries,omitempty"`
	MaxOutput     int      `json:"max_output,omitempty"`
}

// Shell error codes (ShellResult.ErrorCode).
const (
	// ShellNoSession: no session of that name (sandbox.ErrNoShell).
	ShellNoSession = "no_session"
	// ShellExists: open on a name in use (sandbox.ErrShellExists).
	ShellExists = "exists"
	// ShellInvalid: the request is malformed.
	ShellInvalid = "invalid"
)

// ShellResult answers the Shell request ID; see sandbox.ShellResult for
// the fields. Error, if set, says the request failed (ErrorCode names the
// kind, empty for a failure in the guest) and the other fields are unset.
type ShellResult struct {
	ID           uint64 `json:"id"`
	Output       []byte `json:"output,omitempty"`
	OutputCut    int64  `json:"output_cut,omitempty"`
	ExitCode     int    `json:"exit_code"`
	TimedOut     bool   `json:"timed_out,omitempty"`
	SyntaxError  bool   `json:"syntax_error,omitempty"`
	SyntaxStderr string `json:"syntax_stderr,omitempty"`
	Exited       bool   `json:"exited,omitempty"`
	Error        string `json:"error,omitempty"`
	ErrorCode    string `json:"error_code,omitempty"`
}

// MessageType implements Msg.
func (*Shell) MessageType() string { return TypeShell }

// MessageType implements Msg.
func (*ShellResult) MessageType() string { return TypeShellResult }
