// Package workers describes the machines that execute runs: what each can
// offer (its capabilities), how the control plane remembers them, and
// whether a run's sandbox fits one.
package workers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Capabilities are what a worker reports each time it asks for work.
type Capabilities struct {
	Arch        string   `json:"arch"`              // GOARCH, e.g. amd64
	Tiers       []string `json:"tiers"`             // isolation tiers it runs, e.g. ["process"]
	Kernel      string   `json:"kernel,omitempty"`  // host kernel release
	CPUs        float64  `json:"cpus"`              // vCPUs a single sandbox may use
	MemoryBytes int64    `json:"memoryBytes"`       // memory a single sandbox may use
	Slots       int      `json:"slots"`             // runs executed at once
	Digests     []string `json:"digests,omitempty"` // "kernel:…" (tiers with a guest kernel), "rootfs:BASE@sha256:…"
	// Host identifies where the worker keeps workspaces (its machine and
	// data dir); it stays the same across the worker's restarts.
	Host string `json:"host,omitempty"`
}

// Worker is a worker as the control plane last saw it.
type Worker struct {
	ID           string       `json:"id"`
	Capabilities Capabilities `json:"capabilities"`
	LastSeen     time.Time    `json:"lastSeen"`
}

// Need is what a run's sandbox asks for.
type Need struct {
	CPU         float64 `json:"cpu,omitempty"`
	MemoryBytes int64   `json:"memoryBytes,omitempty"`
	// Digests the worker must report: "rootfs:BASE@sha256:…" for an image
	// built at deploy on a built-in base, so the run gets the base its image
	// was built and tested on.
	Digests []string `json:"digests,omitempty"`
	// Image is the digest of the image built at deploy: the worker checks
	// that the image it prepares is that one.
	Image string `json:"image,omitempty"`
	// BaseDigest is what the image's base resolved to at deploy: the
	// worker pulls a registry base by it, not by its tag.
	BaseDigest string `json:"baseDigest,omitempty"`
	// Host, if set, is where the run's workspace's files are: only a
	// worker of that host can take the run.
	Host string `json:"host,omitempty"`
}

// Takes reports whether worker w can run a sandbox needing n, and if not,
// why.
func (w Worker) Takes(n Need) (bool, string) {
	if n.Host != "" && n.Host != w.Capabilities.Host {
		return false, "the run's workspace is on host " + n.Host
	}
	return w.Capabilities.Fits(n)
}

// Fits reports whether a worker with c can run a sandbox needing n, and if
// not, why.
func (c Capabilities) Fits(n Need) (bool, string) {
	switch {
	case n.CPU > c.CPUs:
		return false, fmt.Sprintf("needs %g vCPUs, the worker offers %g", n.CPU, c.CPUs)
	case n.MemoryBytes > c.MemoryBytes:
		return false, fmt.Sprintf("needs %d MiB of memory, the worker offers %d MiB", n.MemoryBytes>>20, c.MemoryBytes>>20)
	}
	for _, d := range n.Digests {
		if !slices.Contains(c.Digests, d) {
			what, _ := strings.CutPrefix(d, "rootfs:")
			return false, fmt.Sprintf("needs base image %s (its image was built on it at deploy), which the worker does not have", what)
		}
	}
	return true, ""
}

// Store remembers workers.
type Store interface {
	// UpsertWorker records w (capabilities and last-seen time).
	UpsertWorker(ctx context.Context, w Worker) error
	// ListWorkers returns the workers seen at or after since, by id.
	ListWorkers(ctx context.Context, since time.Time) ([]Worker, error)
}
