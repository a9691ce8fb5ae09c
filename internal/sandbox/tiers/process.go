package tiers

import (
	"context"
	"fmt"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/process"
)

// processTier runs sandboxes in namespaces on the host's kernel. Its
// state is StateRoot/sandboxes (or SandboxDir), which the sandboxes'
// unprivileged host uids reach by path: each level is searchable by
// others.
var processTier = Tier{
	Name:      "process",
	Strength:  SharedKernel,
	Isolation: "weak: shared kernel, for development and trusted code",
	Probe: func(Host) (string, error) {
		if err := process.Probe(""); err != nil {
			return "", err
		}
		return "namespaces, overlayfs, cgroups, seccomp", nil
	},
	New: func(_ context.Context, h Host) (sandbox.Runtime, error) {
		root, sub := h.StateRoot, []string{"sandboxes", h.Instance}
		if h.SandboxDir != "" {
			root, sub = h.SandboxDir, []string{h.Instance}
		}
		dir, err := stateDir(h, root, sub, true)
		if err != nil {
			return nil, fmt.Errorf("process tier: %w", err)
		}
		c := process.DefaultConfig()
		c.AgentPath, c.StateDir, c.Logger = h.Agent, dir, h.logger()
		return process.New(c)
	},
}
