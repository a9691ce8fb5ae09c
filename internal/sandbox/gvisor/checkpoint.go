package gvisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
)

// checkpointFile is the file of a runsc checkpoint image that holds the
// kernel's state (runsc/boot/restore.go's CheckpointStateFileName).
const checkpointFile = "checkpoint.img"

// Checkpoint implements sandbox.Checkpointer with `runsc checkpoint`, which
// saves the sandbox's kernel, memory and processes and then stops it.
func (r *Runtime) Checkpoint(ctx context.Context, sb sandbox.Sandbox, dir string) error {
	s, ok := sb.(*Sandbox)
	if !ok || s.rt != r {
		return fmt.Errorf("checkpoint: %T is not a sandbox of this gvisor runtime", sb)
	}
	if s.client == nil || s.run == nil {
		return fmt.Errorf("checkpoint sandbox %s: %w: not running", s.spec.ID, sandbox.ErrGuestRuntime)
	}
	s.client.EndAs(sandbox.ErrCheckpointed)
	args := append(r.globalArgs(), "checkpoint", "--image-path", dir, s.spec.ID)
	out, err := exec.CommandContext(ctx, r.cfg.RunscPath, args...).CombinedOutput()
	if err != nil {
		s.client.EndAs(nil)
		return fmt.Errorf("checkpoint sandbox %s: %w: runsc checkpoint: %w: %s", s.spec.ID, sandbox.ErrGuestRuntime, err, strings.TrimSpace(string(out)))
	}
	// The container has stopped: runsc exits and the agent's stream ends.
	// What the agent sent before is read and handed on before Destroy
	// closes the stream.
	timeout := time.NewTimer(destroyTimeout)
	defer timeout.Stop()
	for _, c := range []<-chan struct{}{s.exited, s.client.Done()} {
		select {
		case <-c:
		case <-timeout.C:
		}
	}
	derr := s.Destroy(ctx)
	if err := sandbox.WriteImageDigests(dir); err != nil {
		return errors.Join(derr, fmt.Errorf("checkpoint sandbox %s: %w: %w", s.spec.ID, sandbox.ErrGuestRuntime, err))
	}
	return derr
}

// Restore implements sandbox.Checkpointer with `runsc restore`: a new
// bundle from spec (its layers and workspace mounted afresh) and a new
// stream to the agent, which the restored agent finds on its stdin. An
// image that differs from what Checkpoint wrote is refused (an error
// wrapping sandbox.ErrTamperedImage) before runsc reads any of it.
func (r *Runtime) Restore(ctx context.Context, spec sandbox.Spec, dir string) (sandbox.Sandbox, error) {
	if err := r.normalize(&spec); err != nil {
		return nil, fmt.Errorf("restore sandbox %q: %w: %w", spec.ID, sandbox.ErrInvalidSpec, err)
	}
	if _, err := os.Stat(filepath.Join(dir, checkpointFile)); err != nil {
		return nil, fmt.Errorf("restore sandbox %s: %w: no checkpoint image: %w", spec.ID, sandbox.ErrGuestRuntime, err)
	}
	if err := sandbox.VerifyImage(dir); err != nil {
		return nil, fmt.Errorf("restore sandbox %s: %w: %w", spec.ID, sandbox.ErrGuestRuntime, err)
	}
	return r.start(ctx, spec, dir)
}

// waitRestored waits until runsc reports the restored container running.
func (s *Sandbox) waitRestored(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	for {
		if st, err := s.rt.state(ctx, s.spec.ID); err == nil && st == "running" {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%w: runsc restore exited (%v): %s", sandbox.ErrGuestRuntime, s.run.ProcessState, s.lastLog())
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for restore: %w", sandbox.ErrGuestRuntime, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// state returns runsc's status of container id ("running", "stopped").
func (r *Runtime) state(ctx context.Context, id string) (string, error) {
	args := append(r.globalArgs(), "state", id)
	out, err := exec.CommandContext(ctx, r.cfg.RunscPath, args...).Output()
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return "", err
	}
	if st.Status == "" {
		return "", errors.New("runsc state: no status")
	}
	return st.Status, nil
}
