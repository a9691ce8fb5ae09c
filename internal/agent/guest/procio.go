package guest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// procIO holds a process's pipes: the child's ends until it has started,
// and the agent's ends until the process is done.
type procIO struct {
	// child ends: stdin, stdout, stderr and, with a channel, fd 3
	child []*os.File

	stdinW  *os.File // nil without a stdin pipe
	stdout  *os.File
	stderr  *os.File // nil on a terminal
	channel *os.File // nil without a channel
	// tty: stdinW and stdout are one terminal master (newTTYIO).
	tty bool
}

// newTTYIO gives the process a new pseudo-terminal of rows x cols, owned
// by uid, as stdin, stdout and stderr: the agent types into its master
// and reads what it prints from there.
func newTTYIO(uid uint32, rows, cols uint16, channel bool) (*procIO, error) {
	master, replica, err := allocPTY(uid, rows, cols)
	if err != nil {
		return nil, err
	}
	pio := &procIO{child: []*os.File{replica, replica, replica}, stdinW: master, stdout: master, tty: true}
	if channel {
		ours, theirs, err := socketPair()
		if err != nil {
			_ = master.Close()
			_ = replica.Close()
			return nil, err
		}
		pio.channel = ours
		pio.child = append(pio.child, theirs)
	}
	return pio, nil
}

// resize sets the terminal's size, if the process has one.
func (pio *procIO) resize(rows, cols uint16) error {
	if !pio.tty {
		return errors.New("process has no terminal")
	}
	return setWinSize(pio.stdout, rows, cols)
}

func newProcIO(stdinPipe, channel bool) (pio *procIO, err error) {
	pio = &procIO{}
	defer func() {
		if err != nil {
			pio.closeChild()
			pio.closeOurs()
		}
	}()
	var stdinR *os.File
	if stdinPipe {
		stdinR, pio.stdinW, err = os.Pipe()
	} else {
		stdinR, err = os.Open(os.DevNull)
	}
	if err != nil {
		return nil, fmt.Errorf("stdin: %w", err)
	}
	pio.child = append(pio.child, stdinR)
	for _, our := range []**os.File{&pio.stdout, &pio.stderr} {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("output pipe: %w", err)
		}
		*our = r
		pio.child = append(pio.child, w)
	}
	if channel {
		ours, theirs, err := socketPair()
		if err != nil {
			return nil, err
		}
		pio.channel = ours
		pio.child = append(pio.child, theirs)
	}
	return pio, nil
}

// socketPair returns a pollable end for the agent and a blocking one for
// the child.
func socketPair() (ours, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("channel socketpair: %w", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("channel socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "channel"), os.NewFile(uintptr(fds[1]), "channel-child"), nil
}

func (pio *procIO) childFiles() []*os.File { return pio.child }

func (pio *procIO) closeChild() {
	for _, f := range pio.child {
		_ = f.Close()
	}
	pio.child = nil
}

// closeReaders stops the output and channel relays.
func (pio *procIO) closeReaders() {
	for _, f := range []*os.File{pio.stdout, pio.stderr, pio.channel} {
		if f != nil {
			_ = f.Close()
		}
	}
}

func (pio *procIO) closeOurs() {
	pio.closeReaders()
	if pio.stdinW != nil {
		_ = pio.stdinW.Close()
	}
}

// readLines calls fn with each newline-terminated line of r (without the
// newline; a last unterminated line too). Lines longer than max are dropped.
func readLines(r io.Reader, max int, fn func([]byte)) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	dropping := false
	for {
		chunk, err := br.ReadSlice('\n')
		full := err == nil
		if !dropping {
			line = append(line, chunk...)
			if len(line) > max+1 {
				dropping, line = true, nil
			}
		}
		if full || (errors.Is(err, io.EOF) && len(line) > 0) {
			if !dropping {
				if full {
					line = line[:len(line)-1]
				}
				fn(line)
			}
			line, dropping = nil, false
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return err
		}
	}
}
