package tiers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/gvisor"
)

// gvisorTier runs sandboxes under runsc; its state is StateRoot/gvisor, kept
// from other users (0700).
var gvisorTier = Tier{
	Name:       "gvisor",
	BuildSteps: true,
	Strength:   UserKernel,
	Isolation:  "user-space kernel (runsc, systrap)",
	Probe: func(h Host) (string, error) {
		runsc, err := FindRunsc(h)
		switch {
		case err != nil:
			return "", err
		case os.Geteuid() != 0:
			return "", errors.New("needs root (runsc creates namespaces and cgroups)")
		}
		return "runsc at " + runsc, nil
	},
	New: func(ctx context.Context, h Host) (sandbox.Runtime, error) {
		runsc, err := FindRunsc(h)
		if err != nil {
			return nil, err
		}
		dir, err := stateDir(h, h.StateRoot, []string{"gvisor", h.Instance}, false)
		if err != nil {
			return nil, fmt.Errorf("gvisor tier: %w", err)
		}
		c := gvisor.DefaultConfig()
		c.RunscPath, c.AgentPath, c.Logger, c.StateDir = runsc, h.Agent, h.logger(), dir
		return gvisor.New(ctx, c)
	},
}

// FindRunsc locates a runsc that runs: h.Runsc, else the one
// scripts/install-runsc.sh builds into the cache.
func FindRunsc(h Host) (string, error) {
	p := h.Runsc
	if p == "" {
		p = filepath.Join(h.CacheDir, "bin", "runsc")
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("runsc not found at %s (run scripts/install-runsc.sh, or set HELMR_RUNSC)", p)
	}
	if out, err := exec.Command(p, "--version").CombinedOutput(); err != nil {
		return "", fmt.Errorf("runsc at %s does not run: %v: %s", p, err, strings.TrimSpace(string(out)))
	}
	return p, nil
}
