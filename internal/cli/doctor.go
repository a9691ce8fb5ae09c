package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/config"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/sandbox/tiers"
)

// tierCheck is one isolation tier as this host sees it.
type tierCheck struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Reason    string `json:"reason"`
	Isolation string `json:"isolation"`
}

// tierHost is what the tier registry knows of this host under cfg;
// instance names the worker's sandbox state (see workerInstance).
func tierHost(cfg config.Config, log *slog.Logger, instance string) tiers.Host {
	agent, agentErr := findAgent(cfg.AgentPath)
	return tiers.Host{
		StateRoot: cfg.StateDir, Instance: instance, Agent: agent, AgentErr: agentErr,
		Runsc: cfg.RunscPath, MicroVMVMM: cfg.MicroVMVMM, CacheDir: cfg.CacheDir, SandboxDir: cfg.SandboxDir, Logger: log,
	}
}

// tierChecks is what doctor prints of the tiers' statuses.
func tierChecks(ss []tiers.Status) []tierCheck {
	out := make([]tierCheck, 0, len(ss))
	for _, s := range ss {
		out = append(out, tierCheck{Name: s.Name, Available: s.Available, Reason: s.Detail, Isolation: s.Isolation})
	}
	return out
}

// doctorReport is what doctor says (its --json, and the API's GET
// /v1/doctor).
type doctorReport struct {
	Tiers          []tierCheck `json:"tiers"`
	Policy         string      `json:"policy"`
	Selected       string      `json:"selected"`
	Egress         egressCheck `json:"egress"`
	WorkspaceQuota quotaCheck  `json:"workspaceQuota"`
	Blobs          string      `json:"blobs"` // where a control plane with these settings keeps blobs
	// MicroVM is what the host offers the microvm tier: KVM, the VMMs,
	// the one the tier would use.
	MicroVM tiers.MicroVMHost `json:"microvm"`
	Error   string            `json:"error,omitempty"`
}

// checkHost checks this host under cfg; the error is the runtime
// policy's, when no tier it allows is available.
func checkHost(cfg config.Config) (doctorReport, error) {
	h := tierHost(cfg, nil, "")
	ss := tiers.Statuses(h)
	tier, cerr := tiers.Select(ss, cfg.Runtime)
	rep := doctorReport{Tiers: tierChecks(ss), Policy: cfg.Runtime, Selected: tier.Name, Egress: checkEgress(cfg), WorkspaceQuota: checkQuota(cfg),
		Blobs: describeBlobs(cfg), MicroVM: tiers.ProbeMicroVMHost(h)}
	if cerr != nil {
		rep.Error = cerr.Error()
	}
	return rep, cerr
}

func runDoctor(_ context.Context, a *App, args []string) error {
	rep, cerr := checkHost(a.cfg)
	ts, chosen, egress, quota := rep.Tiers, rep.Selected, rep.Egress, rep.WorkspaceQuota
	if a.json {
		return a.printJSON(rep)
	}
	tw := tabwriter.NewWriter(a.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tSTATUS\tISOLATION\tDETAIL")
	for _, t := range ts {
		status := "unavailable"
		if t.Available {
			status = "available"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, status, t.Isolation, t.Reason)
	}
	tw.Flush()
	writeMicroVM(a.Stdout, rep.MicroVM)
	fmt.Fprintf(a.Stdout, "egress policy %q: %s\n", egress.Policy, egress.Detail)
	fmt.Fprintf(a.Stdout, "workspace quota %q: %s\n", quota.Quota, quota.Detail)
	fmt.Fprintf(a.Stdout, "blobs (control plane): %s\n", rep.Blobs)
	if cerr != nil {
		return cerr
	}
	fmt.Fprintf(a.Stdout, "runtime policy %q selects: %s\n", a.cfg.Runtime, tierLabel(chosen))
	if !egress.OK {
		return errors.New("sandbox networking cannot work on this host under this egress policy")
	}
	if !quota.OK {
		return errors.New("workspace quota: " + quota.Detail)
	}
	return nil
}

// writeMicroVM prints what the host offers the microvm tier: KVM,
// whether a stock kernel boots under it, the VMMs installed, the VMM the
// tier would use, and, where they cannot run here, why Firecracker's
// integration tests are not run.
func writeMicroVM(w io.Writer, m tiers.MicroVMHost) {
	fmt.Fprintf(w, "microVM: KVM: %s\n", m.KVM)
	fmt.Fprintf(w, "microVM: stock kernel under KVM: %s\n", m.StockKernel)
	fmt.Fprintf(w, "microVM: VMMs installed: QEMU %s; %s\n", m.QEMU, m.Firecracker)
	vmm := m.VMM
	if vmm == "" {
		vmm = "none"
	}
	fmt.Fprintf(w, "microVM: the microvm tier's VMM (HELMR_MICROVM_VMM=%s): %s (%s)\n", m.VMMSetting, vmm, m.VMMWhy)
	if m.FirecrackerTests != "" {
		fmt.Fprintf(w, "Firecracker integration tests: not run on this host: %s\n", m.FirecrackerTests)
	} else {
		fmt.Fprintln(w, "Firecracker integration tests: can run on this host")
	}
}

// quotaCheck is what doctor says about workspace quotas.
type quotaCheck struct {
	Quota  string `json:"quota"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

func checkQuota(cfg config.Config) quotaCheck {
	c := quotaCheck{Quota: cfg.WorkspaceQuota}
	n, err := cfg.WorkspaceQuotaBytes()
	switch {
	case err != nil:
		c.Detail = err.Error()
	case n == 0:
		c.OK, c.Detail = true, "none: a run may fill the worker's disk"
	default:
		if err := disk.Check(); err != nil {
			c.Detail = "unavailable on this host: needs " + err.Error() + " (HELMR_WORKSPACE_QUOTA=0 runs without)"
		} else {
			c.OK, c.Detail = true, "each run's workspace is an ext4 disk of its own (sparse image, loop-mounted); writes past it fail with ENOSPC"
		}
	}
	return c
}

// egressCheck is what doctor says about sandbox networking.
type egressCheck struct {
	Policy string `json:"policy"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// checkEgress checks what the egress policy needs: nothing for none; a
// TUN device and upstream resolvers otherwise.
func checkEgress(cfg config.Config) egressCheck {
	p, err := network.ParsePolicy(cfg.Egress)
	if err != nil {
		return egressCheck{Policy: cfg.Egress, Detail: err.Error()}
	}
	c := egressCheck{Policy: p.String()}
	if p.Mode == network.None {
		c.OK, c.Detail = true, "sandboxes have loopback only"
		return c
	}
	if f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0); err != nil {
		c.Detail = "sandboxes cannot get an interface: " + err.Error() + " (load the tun module)"
		return c
	} else {
		f.Close()
	}
	ups, err := network.ParseUpstreams(cfg.DNSUpstream)
	if err == nil && len(ups) == 0 {
		ups, err = network.HostResolvers()
	}
	if err != nil {
		c.Detail = "sandbox DNS has no upstream: " + err.Error() + " (set HELMR_DNS_UPSTREAM)"
		return c
	}
	c.OK = true
	c.Detail = fmt.Sprintf("sandboxes get eth0 %s via the worker's user-space stack; DNS at %s forwards to %v; never reachable: this host's addresses, loopback, link-local metadata",
		network.GuestAddr, network.DNSAddr, ups)
	return c
}

func (a *App) doctorCmd() *cobra.Command {
	return a.withJSON(&cobra.Command{
		Use:     "doctor",
		Short:   "show which isolation tiers work on this host, and which one runs sandboxes",
		GroupID: "admin",
		Args:    exactly(0, "usage: helmr doctor [--runtime R] [--egress E] [--json]"),
		RunE:    func(c *cobra.Command, args []string) error { return runDoctor(c.Context(), a, args) },
	})
}
