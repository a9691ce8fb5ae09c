// Package tiers is the registry of isolation tiers: one table (name,
// isolation strength, a probe that says why a tier cannot run on this
// host, a constructor) that configuration, helmr doctor, the auto policy,
// the worker's runtime and the end-to-end tests all read. Adding a tier is
// one entry here plus its package under internal/sandbox.
//
// Each tier keeps its state under one state root (HELMR_STATE_DIR,
// default DefaultStateRoot), in a subdirectory of its own and there in a
// directory per worker instance, each level created with the mode that
// tier needs (see stateDir), so a tier works whatever ran on the host
// before it.
package tiers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/helmr/helmr/internal/sandbox"
)

// Auto is the policy that picks the strongest tier available here that is a
// security boundary here (see Tier.AutoPick).
const Auto = "auto"

// DefaultStateRoot is where tiers keep their state unless configured.
const DefaultStateRoot = "/run/helmr"

// Strength orders tiers by how strongly they isolate a sandbox from the
// host; Auto picks the strongest available.
type Strength int

// Strengths, weakest first.
const (
	// SharedKernel: namespaces and cgroups on the host's own kernel.
	SharedKernel Strength = iota + 1
	// UserKernel: a user-space kernel between task code and the host's.
	UserKernel
	// HardwareVM: a virtual machine with a kernel of its own.
	HardwareVM
)

// Host is what the probes and constructors know of this host and worker.
type Host struct {
	// StateRoot holds every tier's state (HELMR_STATE_DIR).
	StateRoot string
	// Instance names the worker's sandbox state: a tier keeps it in
	// StateRoot/<tier's dir>/<Instance>, apart from other workers'.
	Instance string
	// Agent is the static helmr-agent binary; AgentErr says why there is
	// none (every tier needs it).
	Agent    string
	AgentErr error
	// Runsc is gVisor's runsc (HELMR_RUNSC); empty: CacheDir/bin/runsc.
	Runsc string
	// MicroVMVMM is the microvm tier's VMM setting (HELMR_MICROVM_VMM):
	// qemu, firecracker or auto (empty: auto).
	MicroVMVMM string
	CacheDir   string
	// SandboxDir, if set, is the process tier's state in place of
	// StateRoot/sandboxes (HELMR_SANDBOX_DIR).
	SandboxDir string
	// Logger receives the runtime's logs. Default: discarded.
	Logger *slog.Logger
}

func (h Host) logger() *slog.Logger {
	if h.Logger == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return h.Logger
}

// Tier is one isolation tier.
type Tier struct {
	Name     string
	Strength Strength
	// Isolation says in a few words what separates a sandbox from the
	// host (helmr doctor prints it).
	Isolation string
	// Probe returns why the tier cannot run on h, or what it runs on.
	Probe func(h Host) (detail string, err error)
	// New starts the tier's runtime on h; nil when this build has no such
	// tier yet.
	New func(ctx context.Context, h Host) (sandbox.Runtime, error)
	// AutoPick, if set, says whether Auto may pick the tier on h when it
	// is available: a tier that runs but is no security boundary there (a
	// microVM under emulation) is chosen only by name. Nil: it may.
	AutoPick func(h Host) bool
	// BuildSteps: the tier runs image build steps (sandbox.Spec.RootUpper).
	BuildSteps bool
	// BuildElsewhere: a worker on the tier, which runs no build steps,
	// runs them on another tier (SelectBuild) rather than failing them.
	// The process tier's workers fail them, pointing at gvisor: its
	// operator chose to run nothing in a stronger sandbox's runtime.
	BuildElsewhere bool
}

// registry lists the tiers, strongest first.
var registry = []Tier{microVMTier, gvisorTier, processTier}

// All returns the tiers, strongest first.
func All() []Tier { return append([]Tier(nil), registry...) }

// Built returns the names of the tiers this build can run, strongest
// first.
func Built() []string {
	var out []string
	for _, t := range registry {
		if t.New != nil {
			out = append(out, t.Name)
		}
	}
	return out
}

// Lookup returns the tier called name.
func Lookup(name string) (Tier, bool) {
	for _, t := range registry {
		if t.Name == name {
			return t, true
		}
	}
	return Tier{}, false
}

// Policies lists the runtime policies an operator may set, for messages:
// "auto, gvisor or process".
func Policies() string {
	names := append([]string{Auto}, Built()...)
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// PolicyDoc lists the tiers of this build for documentation, strongest
// first: "`gvisor` or `process`".
func PolicyDoc() string {
	names := Built()
	for i, n := range names {
		names[i] = "`" + n + "`"
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// CheckPolicy reports whether policy is Auto or a tier of this build.
func CheckPolicy(policy string) error {
	if t, ok := Lookup(policy); policy == Auto || ok && t.New != nil {
		return nil
	}
	return fmt.Errorf("unknown runtime %q (choose %s)", policy, Policies())
}

// Status is a tier as this host sees it.
type Status struct {
	Tier
	Available bool
	// AutoOK: Auto may pick the tier (it is available and a boundary here).
	AutoOK bool
	// Detail says what the tier runs on here, or why it cannot run.
	Detail string
}

// Statuses probes every tier on h, strongest first.
func Statuses(h Host) []Status {
	out := make([]Status, 0, len(registry))
	for _, t := range registry {
		out = append(out, probe(t, h))
	}
	return out
}

func probe(t Tier, h Host) Status {
	s := Status{Tier: t}
	detail, err := t.Probe(h)
	switch {
	case err != nil:
		s.Detail = err.Error()
	case t.New == nil:
		s.Detail = "not in this build"
	case h.Agent == "":
		s.Detail = "helmr-agent not found"
		if h.AgentErr != nil {
			s.Detail = h.AgentErr.Error()
		}
	default:
		s.Available, s.Detail = true, detail
		s.AutoOK = t.AutoPick == nil || t.AutoPick(h)
	}
	return s
}

// Choose applies the operator's policy on h: a named tier must be
// available; Auto takes the strongest available one.
func Choose(policy string, h Host) (Tier, error) { return Select(Statuses(h), policy) }

// Select applies policy to tiers already probed (Statuses).
func Select(ss []Status, policy string) (Tier, error) {
	for _, s := range ss {
		if s.Name == policy {
			if !s.Available {
				return Tier{}, fmt.Errorf("runtime %s is unavailable here: %s", s.Name, s.Detail)
			}
			return s.Tier, nil
		}
	}
	if policy != Auto {
		return Tier{}, fmt.Errorf("unknown runtime %q (%s)", policy, Policies())
	}
	var best *Status
	for i, s := range ss {
		if s.Available && s.AutoOK && (best == nil || s.Strength > best.Strength) {
			best = &ss[i]
		}
	}
	if best == nil {
		return Tier{}, errors.New("no isolation tier works on this host (see helmr doctor)")
	}
	return best.Tier, nil
}

// ChooseBuild returns the tier that runs image build steps for a worker
// on t, probing h: see SelectBuild.
func ChooseBuild(t Tier, h Host) (Tier, error) { return SelectBuild(Statuses(h), t) }

// SelectBuild returns the tier that runs image build steps for a worker
// on t, among tiers already probed: t if it runs them; for a tier that
// builds elsewhere, the strongest available tier that does and that Auto
// may pick (gvisor; images are layer directories, the same whichever tier
// built them). None is an error: such a worker's build steps fail.
func SelectBuild(ss []Status, t Tier) (Tier, error) {
	if t.BuildSteps {
		return t, nil
	}
	if !t.BuildElsewhere {
		return Tier{}, fmt.Errorf("the %s tier runs no image build steps", t.Name)
	}
	var best *Status
	for i, s := range ss {
		if s.Available && s.AutoOK && s.BuildSteps && (best == nil || s.Strength > best.Strength) {
			best = &ss[i]
		}
	}
	if best == nil {
		return Tier{}, fmt.Errorf("the %s tier runs no image build steps, and no other tier that does works on this host (see helmr doctor)", t.Name)
	}
	return best.Tier, nil
}
