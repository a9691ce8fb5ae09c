// Command helmr-agent is the guest agent: the first process of every
// sandbox. It speaks the agent protocol (internal/agent) over one stream.
//
//	helmr-agent init [-v]          process tier: stream on fd 3; set the
//	                               sandbox up from the init frame, then serve
//	helmr-agent serve --fd N [-v]  serve on fd N in a guest already set up
//	helmr-agent vminit [-v]        a microVM's init (PID 1; also when started
//	                               as PID 1 with no arguments, as the kernel
//	                               starts /init): mounts, modules and disks,
//	                               then the sandbox's agent (vmsandbox) on
//	                               the virtio-serial port
//	helmr-agent vmsandbox [-v]     a microVM's sandbox agent, started by
//	                               vminit: init mode on fd 3
//
// Build it static: CGO_ENABLED=0 go build ./cmd/helmr-agent.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/helmr/helmr/internal/agent/guest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "helmr-agent:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 && os.Getpid() == 1 {
		args = []string{"vminit"}
	}
	if len(args) == 0 {
		return fmt.Errorf("usage: helmr-agent init | serve --fd N | vminit")
	}
	if args[0] == guest.LimitExecMode {
		// Runs between the agent's fork and the task's exec: no threads
		// to reserve, no logging, only the cap and the exec.
		return guest.RunLimitExec(args[1:])
	}
	fs := flag.NewFlagSet("helmr-agent "+args[0], flag.ContinueOnError)
	fd := fs.Int("fd", 3, "file descriptor of the worker stream")
	verbose := fs.Bool("v", false, "debug logging")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	stop := guest.ShieldSignals(log)
	defer stop()
	if args[0] == "vminit" {
		if os.Getpid() != 1 {
			return fmt.Errorf("vminit runs only as a VM's init (PID 1)")
		}
		return guest.RunVM(log)
	}
	if args[0] == guest.VMSandboxMode {
		// The VM's init started this agent with the stream on fd 3.
		return guest.RunVMSandbox(os.NewFile(uintptr(*fd), "vm-port"), log)
	}
	conn, err := openStream(*fd)
	if err != nil {
		return err
	}
	defer conn.Close()
	switch args[0] {
	case "init":
		// The process tier counts the agent's threads in the sandbox's
		// pids limit; serve mode's tiers cap only what the agent starts.
		guest.ReserveThreads(guest.ReservedThreads)
		return guest.RunInit(conn, guest.Prepare, log)
	case "serve":
		return guest.RunServe(conn, log)
	}
	return fmt.Errorf("unknown mode %q", args[0])
}

// openStream wraps fd as a socket if it is one (pollable, closable while
// read), else as a plain file (a serial port).
func openStream(fd int) (io.ReadWriteCloser, error) {
	f := os.NewFile(uintptr(fd), "worker-stream")
	if f == nil {
		return nil, fmt.Errorf("fd %d is not open", fd)
	}
	if c, err := net.FileConn(f); err == nil {
		_ = f.Close()
		return c, nil
	}
	return f, nil
}
