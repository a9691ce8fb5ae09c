package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/gvisor"
	"github.com/helmr/helmr/internal/sandbox/network"
)

// waiterJS prints "before", then waits on its channel (fd 3) for one
// message and prints "after": the bare counterpart of the bench task's
// ctx.wait.human, whose answer also arrives on the adapter's channel.
const waiterJS = `
const net = require('net'), readline = require('readline');
const s = new net.Socket({ fd: 3, readable: true, writable: true });
console.log('before');
readline.createInterface({ input: s }).once('line', () => { console.log('after'); process.exit(0); });
`

// bare checkpoints and restores gVisor sandboxes with the gvisor tier's
// Checkpointer (runsc checkpoint, runsc restore), nothing of Helmr's
// parking around it: no workspace disk, sealing, upload or scheduling.
type bare struct {
	rt     *gvisor.Runtime
	rootfs string
	state  string
	// restores are the samples' restore part: from the start of runsc
	// restore to the line, the checkpoint left out.
	restores []time.Duration
}

func newBare(runsc, agent, rootfs string) (*bare, error) {
	// runsc's control socket path must fit in sockaddr_un: a short dir.
	state, err := os.MkdirTemp("", "helmr-park-")
	if err != nil {
		return nil, err
	}
	rt, err := gvisor.New(context.Background(), gvisor.Config{
		RunscPath: runsc, AgentPath: agent, StateDir: state,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		os.RemoveAll(state)
		return nil, err
	}
	return &bare{rt: rt, rootfs: rootfs, state: state}, nil
}

func (b *bare) close() {
	_ = syscall.Unmount(filepath.Join(b.state, "runsc", "null-netns"), syscall.MNT_DETACH)
	_ = os.RemoveAll(b.state)
}

// lines collects a process's stdout and signals each "after" line.
type lines struct {
	before chan struct{}
	after  chan time.Time
}

func newLines() *lines {
	return &lines{before: make(chan struct{}, 1), after: make(chan time.Time, 1)}
}

func (l *lines) onOutput(_ string, p []byte) {
	for _, s := range strings.Split(string(p), "\n") {
		switch s {
		case "before":
			l.before <- struct{}{}
		case "after":
			l.after <- time.Now()
		}
	}
}

// sample starts a sandbox like the bench task's (base root filesystem,
// 512 MiB, open network), runs waiterJS in it until it printed "before",
// and times runsc checkpoint + runsc restore + the answer on the channel
// until "after" arrives from the restored process.
func (b *bare) sample() (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	ws, err := os.MkdirTemp("", "helmr-park-ws-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(ws)
	spec := sandbox.Spec{ID: "park-" + hex.EncodeToString(id), RootLayers: []string{b.rootfs}, WorkspaceHost: ws,
		UID: 1000, GID: 1000, MemoryBytes: 512 << 20, Network: &network.Config{Policy: network.Policy{Mode: network.Open}}}
	sb, err := b.rt.Start(ctx, spec)
	if err != nil {
		return 0, err
	}
	defer func() { _ = sb.Destroy(context.Background()) }()
	out := newLines()
	done := make(chan error, 1)
	go func() {
		_, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"node", "-e", waiterJS}, Channel: true, OnOutput: out.onOutput})
		done <- err
	}()
	select {
	case <-out.before:
	case err := <-done:
		return 0, fmt.Errorf("bare node ended before printing: %v", err)
	case <-ctx.Done():
		return 0, errors.New("bare node printed nothing")
	}
	image, err := os.MkdirTemp("", "helmr-park-image-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(image)
	t0 := time.Now()
	if err := b.rt.Checkpoint(ctx, sb, image); err != nil {
		return 0, err
	}
	var cerr *sandbox.CheckpointedError
	if err := <-done; !errors.As(err, &cerr) {
		return 0, fmt.Errorf("exec during checkpoint = %v, want a CheckpointedError", err)
	}
	return b.restore(ctx, spec, image, cerr.ExecID, t0)
}

// restore restores the checkpoint in image, re-attaches to the waiting
// process, answers it and returns the time from t0 to its "after".
func (b *bare) restore(ctx context.Context, spec sandbox.Spec, image string, execID uint64, t0 time.Time) (time.Duration, error) {
	began := time.Now()
	sb, err := b.rt.Restore(ctx, spec, image)
	if err != nil {
		return 0, err
	}
	defer func() { _ = sb.Destroy(context.Background()) }()
	out := newLines()
	done := make(chan error, 2)
	go func() {
		_, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"node"}, Channel: true, Attach: execID, OnOutput: out.onOutput,
			Started: func(s sandbox.Sender) {
				if err := s.Send([]byte(`"go"`)); err != nil {
					done <- err
				}
			}})
		done <- err
	}()
	select {
	case t1 := <-out.after:
		b.restores = append(b.restores, t1.Sub(began))
		return t1.Sub(t0), nil
	case err := <-done:
		return 0, fmt.Errorf("restored node ended without printing after: %v", err)
	case <-ctx.Done():
		return 0, errors.New("restored node printed nothing")
	}
}
