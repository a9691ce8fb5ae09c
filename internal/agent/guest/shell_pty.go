package guest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Terminal size of a shell session: SWE-ReX's sessions (pexpect) use 24x80,
// and programs that format for the terminal (ls, ps) print the same.
const (
	ptyRows = 24
	ptyCols = 80
)

// openPTY allocates a shell session's pseudo-terminal (allocPTY, 24x80)
// and turns echo off: the lines the agent types are not shown.
func openPTY(uid uint32) (master, replica *os.File, err error) {
	master, replica, err = allocPTY(uid, ptyRows, ptyCols)
	if err != nil {
		return nil, nil, err
	}
	if err := setTerminalModes(master); err != nil {
		_ = master.Close()
		_ = replica.Close()
		return nil, nil, err
	}
	return master, replica, nil
}

// allocPTY allocates a pseudo-terminal pair of rows x cols from the
// guest's /dev/ptmx, in the kernel's default modes: the master (the
// agent's end, pollable) and the replica (the process's), owned by uid so
// that the user can reopen its own terminal.
func allocPTY(uid uint32, rows, cols uint16) (master, replica *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	defer func() {
		if err != nil {
			_ = master.Close()
		}
	}()
	var n int
	err = control(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return fmt.Errorf("unlock pty: %w", err)
		}
		var err error
		if n, err = unix.IoctlGetInt(fd, unix.TIOCGPTN); err != nil {
			return fmt.Errorf("pty number: %w", err)
		}
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	if err != nil {
		return nil, nil, err
	}
	name := "/dev/pts/" + strconv.Itoa(n)
	replica, err = os.OpenFile(name, os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", name, err)
	}
	_ = replica.Chown(int(uid), -1) // as login does; a terminal the user cannot reopen still works
	return master, replica, nil
}

// setWinSize sets the terminal's size; the kernel signals its foreground
// process group (SIGWINCH).
func setWinSize(master *os.File, rows, cols uint16) error {
	return control(master, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
}

// setTerminalModes puts the terminal in the state the agent types into:
// canonical lines, signals from ^C and ^Z, no echo, output "\n" as "\r\n".
// The agent reasserts it before every line it types, in case a command
// changed it (stty echo would otherwise show the typed line).
func setTerminalModes(master *os.File) error {
	return control(master, func(fd int) error {
		t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return fmt.Errorf("get terminal modes: %w", err)
		}
		t.Lflag |= unix.ICANON | unix.ISIG | unix.IEXTEN
		t.Lflag &^= unix.ECHO | unix.ECHOE | unix.ECHOK | unix.ECHONL
		t.Iflag |= unix.ICRNL
		t.Oflag |= unix.OPOST | unix.ONLCR
		t.Cc[unix.VINTR], t.Cc[unix.VSUSP], t.Cc[unix.VEOF] = 3, 26, 4
		if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
			return fmt.Errorf("set terminal modes: %w", err)
		}
		return nil
	})
}

// foregroundGroup is the terminal's foreground process group.
func foregroundGroup(master *os.File) (int, error) {
	var pg int
	err := control(master, func(fd int) error {
		var err error
		pg, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	return pg, err
}

// control runs fn on f's descriptor without making it blocking (as Fd
// would).
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// killSession sends SIGKILL to every process of session sid (the shell
// and what it started, background jobs included: each job has a process
// group of its own), until none is left or rounds run out; a process that
// started a session of its own has left the shell's, as after a logout.
func killSession(sid int) {
	_ = unix.Kill(-sid, unix.SIGKILL)
	for range 20 {
		pids := sessionMembers(sid)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	}
}

// sessionMembers lists the live processes of session sid from /proc.
func sessionMembers(sid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if s, state, ok := statSession(b); ok && s == sid && state != 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// statSession reads the session id and state of a /proc/PID/stat line:
// "pid (comm) state ppid pgrp session ...", comm possibly holding spaces
// and parentheses.
func statSession(stat []byte) (sid int, state byte, ok bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(stat[i+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return 0, 0, false
	}
	sid, err := strconv.Atoi(string(f[3]))
	return sid, f[0][0], err == nil
}
