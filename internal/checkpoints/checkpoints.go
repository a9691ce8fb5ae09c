package checkpoints

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/workers"
)

// Prefix starts checkpoint ids.
const Prefix = "ck_"

// Checkpoint is a parked run's saved sandbox and workspace: one sealed blob
// (see Seal) under its id in the blob store, and what a worker must be to
// restore it.
type Checkpoint struct {
	ID    string `json:"id"`
	RunID string `json:"runId"`
	// WaitpointID is the waitpoint the run waits on; ExecID is the
	// adapter's process in the sandbox and RequestID the adapter's wait
	// request that the restoring worker answers with the wait's result.
	WaitpointID string `json:"waitpointId"`
	ExecID      uint64 `json:"execId"`
	RequestID   int64  `json:"requestId"`
	// What restores it: the same arch, tier, guest kernel and root
	// filesystem.
	Arch   string `json:"arch"`
	Tier   string `json:"tier"`
	Kernel string `json:"kernel"` // "kernel:runsc@sha256:…"
	Rootfs string `json:"rootfs"` // "rootfs:…@sha256:…", or "" for a registry image
	// Size is the sealed blob's size in bytes.
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"createdAt"`
	// RestoredAt is when a worker restored the run from the checkpoint;
	// nil while the run is parked on it. A restored checkpoint is kept
	// until the run ends or parks again: should the run's worker be lost,
	// the retry restores it (the run's memory when it parked).
	RestoredAt *time.Time `json:"restoredAt,omitempty"`
}

// Validate reports whether c is complete enough to store.
func (c Checkpoint) Validate() error {
	switch {
	case !strings.HasPrefix(c.ID, Prefix) || len(c.ID) > 64:
		return fmt.Errorf("checkpoint id %q: want %s…", c.ID, Prefix)
	case c.RunID == "" || c.WaitpointID == "":
		return errors.New("checkpoint: run and waitpoint are required")
	case c.Arch == "" || c.Tier == "" || c.Kernel == "":
		return errors.New("checkpoint: arch, tier and kernel are required")
	case c.Size <= 0:
		return errors.New("checkpoint: size must be positive")
	}
	return nil
}

// Need is what a worker must report to restore c.
func (c Checkpoint) Need() workers.Need {
	n := workers.Need{Digests: []string{c.Kernel}}
	if c.Rootfs != "" {
		n.Digests = append(n.Digests, c.Rootfs)
	}
	return n
}

// Mismatch says how a worker with caps cannot restore c, or "" if it can.
func (c Checkpoint) Mismatch(caps workers.Capabilities, tier string) string {
	var why []string
	if caps.Arch != c.Arch {
		why = append(why, fmt.Sprintf("arch %s, checkpoint %s", caps.Arch, c.Arch))
	}
	if tier != c.Tier {
		why = append(why, fmt.Sprintf("tier %s, checkpoint %s", tier, c.Tier))
	}
	for _, d := range c.Need().Digests {
		if !slices.Contains(caps.Digests, d) {
			why = append(why, "lacks "+d)
		}
	}
	return strings.Join(why, "; ")
}

// Filter selects checkpoints: of a run, or of the runs parked on a
// waitpoint (at least one is set).
type Filter struct {
	RunID       string
	WaitpointID string
}

// Store keeps checkpoint records. Get returns an error wrapping
// errdefs.ErrNotFound for an unknown id.
type Store interface {
	CreateCheckpoint(ctx context.Context, c Checkpoint) error
	GetCheckpoint(ctx context.Context, id string) (Checkpoint, error)
	// ListCheckpoints lists the checkpoints matching f, oldest first.
	ListCheckpoints(ctx context.Context, f Filter) ([]Checkpoint, error)
	// RestoredCheckpoint sets the checkpoint's RestoredAt.
	RestoredCheckpoint(ctx context.Context, id string, at time.Time) error
	DeleteCheckpoint(ctx context.Context, id string) error
}

// Blobs holds sealed checkpoint bytes by checkpoint id (and workspace
// snapshots by theirs): the part of blobs.Store that checkpoints need. Get
// of an unknown id returns an error wrapping errdefs.ErrNotFound; a
// malformed id is errdefs.ErrInvalid.
type Blobs interface {
	// Put stores r's bytes under id, replacing any; a failed Put leaves
	// nothing under id.
	Put(ctx context.Context, id string, r io.Reader) (int64, error)
	Get(ctx context.Context, id string) (io.ReadCloser, error)
	Delete(ctx context.Context, id string) error
}
