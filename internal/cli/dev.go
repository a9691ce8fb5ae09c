package cli

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/config"
	"github.com/helmr/helmr/internal/metrics"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/sandbox/tiers"
	"github.com/helmr/helmr/internal/tsbundle"
	"github.com/helmr/helmr/internal/worker"
)

func (a *App) devCmd() *cobra.Command {
	var watch string
	c := &cobra.Command{
		Use:     "dev",
		Short:   "run the control plane, a worker and the embedded store in one process",
		GroupID: "serve",
		Args:    exactly(0, "usage: helmr dev [flags] (no arguments)"),
		RunE:    func(c *cobra.Command, _ []string) error { return runDev(c.Context(), a, watch) },
	}
	c.Flags().StringVar(&watch, "watch", "", "deploy the task project at this path once started, then again whenever its files change")
	return c
}

// runDev runs helmr dev; with watch (a task project's path), it deploys
// the project once started and on every change (see watcher).
func runDev(ctx context.Context, a *App, watch string) error {
	a.dev = true
	if watch != "" {
		var err error
		if watch, err = checkWatchPath(watch); err != nil {
			return err
		}
	}
	cp, log, err := a.bootControlPlane(ctx)
	if err != nil {
		return err
	}
	if n, err := cp.runs.FailOrphans(ctx, "helmr dev stopped while the run was in progress"); err != nil {
		log.Warn("fail orphaned runs", "err", err)
	} else if n > 0 {
		log.Info("failed runs left unfinished by the previous helmr dev", "runs", n)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	w, err := newWorker(a.cfg, true, log, &worker.Local{Runs: cp.runs, Deployments: cp.store, Workspaces: cp.store, Waits: cp.waits, Ops: cp.ops,
		Checkpoints: cp.store, Blobs: cp.blobs, Logger: log}, "", workerID(), metrics.NewWorker(cp.reg))
	if err != nil {
		stopWorker()
		cp.Close(context.Background())
		return err
	}
	stopMetrics, err := serveMetrics(a.cfg.MetricsAddr, cp.reg, a.Stdout, log, append(cp.ready, workerCheck(w))...)
	if err != nil {
		stopWorker()
		cp.Close(context.Background())
		return err
	}
	defer stopMetrics()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = w.Run(wctx)
	}()
	a.cfg.URL = cp.url
	p, _ := config.LoadProfile(a.cfg.Profile)
	p.URL, p.Credential = cp.url, cp.owner
	if err := config.SaveProfile(a.cfg.Profile, p); err != nil {
		log.Warn("cannot save the CLI profile: the CLI has no credential for this helmr dev (use HELMR_API_KEY)", "path", a.cfg.Profile, "err", err)
	}
	fmt.Fprintf(a.Stdout, "Helmr dev at %s (data in %s)\n", cp.url, a.cfg.DataDir)
	where := filepath.Join(a.cfg.DataDir, "owner.token")
	if a.cfg.OwnerToken != "" || a.cfg.OwnerTokenFile != "" {
		where = "HELMR_OWNER_TOKEN(_FILE)"
	}
	fmt.Fprintf(a.Stdout, "Sign in to the console at %s/login with the owner credential (%s); the CLI has it in its profile\n", cp.url, where)
	if watch != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.watchProject(ctx, watch)
		}()
	}
	<-ctx.Done()
	stopWorker()
	wg.Wait()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cp.Close(sctx)
}

func (a *App) workerCmd() *cobra.Command {
	var controlURL string
	c := &cobra.Command{
		Use:     "worker",
		Short:   "run a worker against a control plane (--control-url; HELMR_WORKER_TOKEN: its worker credential)",
		GroupID: "serve",
		Args:    exactly(0, "usage: helmr worker --control-url URL (no arguments)"),
		RunE:    func(c *cobra.Command, _ []string) error { return runWorker(c.Context(), a, controlURL) },
	}
	c.Flags().StringVar(&controlURL, "control-url", a.cfg.URL, "control plane URL")
	return c
}

func runWorker(ctx context.Context, a *App, controlURL string) error {
	if a.cfg.WorkerToken == "" {
		return errors.New("a worker needs HELMR_WORKER_TOKEN: a worker credential (helmr apikey create --worker) or the control plane's shared worker token")
	}
	id := workerID()
	if cred, ok := apikeys.WorkerCredentialID(a.cfg.WorkerToken); ok {
		id = cred + "." + id // the control plane lets this credential act only as such IDs
	}
	if err := a.cfg.Validate(); err != nil {
		return err
	}
	log := a.logger()
	c := client.New(controlURL, a.cfg.WorkerToken)
	c.HTTP.Timeout = 60 * time.Second
	// A worker's operations, their data and results are in the memory
	// of the replica it takes them from: a load balancer keeps all of a
	// worker's requests on one replica by this header.
	c.Header = http.Header{client.WorkerHeader: {id}}
	reg := metrics.NewRegistry()
	w, err := newWorker(a.cfg, false, log, client.Worker{C: c}, controlURL, id, metrics.NewWorker(reg))
	if err != nil {
		return err
	}
	stopMetrics, err := serveMetrics(a.cfg.MetricsAddr, reg, a.Stdout, log, workerCheck(w))
	if err != nil {
		return err
	}
	defer stopMetrics()
	fmt.Fprintf(a.Stdout, "Helmr worker leasing runs from %s\n", controlURL)
	return w.Run(ctx)
}

// newNetwork is the sandboxes' egress under cfg; controlURL's host, if
// not this machine, is added to the networks no sandbox reaches.
func newNetwork(cfg config.Config, controlURL string, log *slog.Logger) (*network.Config, error) {
	policy, err := network.ParsePolicy(cfg.Egress)
	if err != nil {
		return nil, err
	}
	ups, err := network.ParseUpstreams(cfg.DNSUpstream)
	if err != nil {
		return nil, err
	}
	nc := &network.Config{Policy: policy, Upstream: ups, Logger: log}
	if controlURL != "" {
		u, err := url.Parse(controlURL)
		if err != nil {
			return nil, fmt.Errorf("control plane URL: %w", err)
		}
		addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", u.Hostname())
		if err != nil {
			return nil, fmt.Errorf("resolve the control plane's host %q (sandboxes must not reach it): %w", u.Hostname(), err)
		}
		for _, a := range addrs {
			nc.Deny = append(nc.Deny, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	if err := nc.Validate(); err != nil {
		return nil, err
	}
	if cfg.EgressCACerts != "" {
		if nc.UpstreamRoots, err = upstreamRoots(cfg.EgressCACerts); err != nil {
			return nil, err
		}
	}
	log.Info("sandbox egress", "policy", policy.String())
	return nc, nil
}

// upstreamRoots is the host's system roots and the PEM certificates in
// file (HELMR_EGRESS_CA_CERTS): what the worker verifies the real
// upstream of an intercepted connection against.
func upstreamRoots(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("HELMR_EGRESS_CA_CERTS: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("HELMR_EGRESS_CA_CERTS: %s holds no PEM certificate", file)
	}
	return pool, nil
}

// newWorker builds the worker; m times its sandboxes' starts and
// restores, counts its egress denials and reads its slots.
func newWorker(cfg config.Config, dev bool, log *slog.Logger, control worker.ControlPlane, controlURL, id string, m *metrics.Worker) (*worker.Worker, error) {
	rt, tier, err := newRuntime(cfg, log, workerInstance(cfg.DataDir))
	if err != nil {
		return nil, err
	}
	rt = m.Instrument(rt)
	buildRT, err := newBuildRuntime(cfg, log, workerInstance(cfg.DataDir), tier)
	if err != nil {
		return nil, err
	}
	if buildRT != nil {
		buildRT = m.Instrument(buildRT)
	}
	key, err := checkpointKey(cfg, dev, rt, log)
	if err != nil {
		return nil, err
	}
	nc, err := newNetwork(cfg, controlURL, log)
	if err != nil {
		return nil, err
	}
	nc.Tally = m.Denied
	quota, err := cfg.WorkspaceQuotaBytes()
	if err != nil {
		return nil, err
	}
	layerMax, err := cfg.LayerCacheBytes()
	if err != nil {
		return nil, err
	}
	rootSize, err := cfg.RootSizeBytes()
	if err != nil {
		return nil, err
	}
	adapter, err := tsbundle.Adapter()
	if err != nil {
		return nil, fmt.Errorf("bundle the guest adapter: %w", err)
	}
	w, err := worker.New(worker.Config{
		ID: id, DataDir: cfg.DataDir, Slots: cfg.Slots, Warm: cfg.Warm, Heartbeat: cfg.Heartbeat,
		Runtime: rt, BuildRuntime: buildRT, Control: control, Logger: log, Network: nc, WorkspaceQuota: quota, RootSize: rootSize, ExtraCACerts: cfg.ExtraCACerts, LayerCacheMax: layerMax,
		Adapter:   adapter,
		Images:    resolverFor(cfg.DataDir, cfg.CacheDir),
		ParkAfter: cfg.ParkAfter, CheckpointKey: key, WorkspaceIdle: cfg.WorkspaceIdle, ShellIdle: cfg.ShellIdle,
		KeepMoved: cfg.KeepMoved,
	})
	if err != nil {
		return nil, err
	}
	m.Slots(w.Slots(), w.Busy)
	return w, nil
}

// checkpointKey is the key a worker seals checkpoints and workspace
// snapshots with (HELMR_CHECKPOINT_ENCRYPTION_KEY, the same on every
// worker); helmr dev makes one in DATA_DIR/checkpoint.key on first start
// if none is set. A worker whose tier can checkpoint and that parks
// (HELMR_PARK_AFTER > 0) refuses to start without one; any other runs
// without, but saves no workspace snapshots, so its workspaces cannot move
// to another worker (nil).
func checkpointKey(cfg config.Config, dev bool, rt sandbox.Runtime, log *slog.Logger) (*checkpoints.Key, error) {
	value := cfg.CheckpointKey
	if value == "" && dev {
		path := filepath.Join(cfg.DataDir, "checkpoint.key")
		if err := devKeyFile(path, "the checkpoint encryption key", log); err != nil {
			return nil, fmt.Errorf("development checkpoint key: %w", err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		value = strings.TrimSpace(string(data))
	}
	if value == "" {
		if _, ok := rt.(sandbox.Checkpointer); ok && cfg.ParkAfter > 0 {
			return nil, fmt.Errorf("the %s tier parks waiting runs (HELMR_PARK_AFTER=%s), which needs HELMR_CHECKPOINT_ENCRYPTION_KEY (base64 of 32 bytes, the same on every worker: openssl rand -base64 32); set HELMR_PARK_AFTER=0 to keep waiting runs' sandboxes up instead", rt.Name(), cfg.ParkAfter)
		}
		log.Warn("no HELMR_CHECKPOINT_ENCRYPTION_KEY: this worker saves no workspace snapshots, so the workspaces it holds cannot move to another worker if it goes away")
		return nil, nil
	}
	k, err := checkpoints.ParseKey(value)
	if err != nil {
		return nil, fmt.Errorf("HELMR_CHECKPOINT_ENCRYPTION_KEY: %w", err)
	}
	return &k, nil
}

// workerInstance names the sandbox state of the worker of a data dir:
// the same across its restarts (so a worker removes what its crashed
// predecessor left), apart from every other worker and helmr process on
// the machine (whose sandboxes it must never touch).
func workerInstance(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return "w-" + hex.EncodeToString(sum[:6])
}

// newRuntime starts the isolation tier the operator's policy selects (see
// package tiers and helmr doctor), its sandbox state under the state root
// in a directory of its own instance (see workerInstance): starting a
// runtime removes the sandboxes its instance left, and only those.
func newRuntime(cfg config.Config, log *slog.Logger, instance string) (sandbox.Runtime, tiers.Tier, error) {
	h := tierHost(cfg, log, instance)
	tier, err := tiers.Choose(cfg.Runtime, h)
	if err != nil {
		return nil, tiers.Tier{}, err
	}
	log.Info("isolation tier", "tier", tier.Name, "policy", cfg.Runtime, "state_root", cfg.StateDir)
	rt, err := tier.New(context.Background(), h)
	return rt, tier, err
}

// newBuildRuntime starts the tier that runs image build steps for a
// worker on tier, when tier runs none, builds elsewhere and another tier
// here runs them (nil otherwise: tier's sandboxes refuse the steps,
// failing the builds that have any): see tiers.SelectBuild. Its sandboxes' state is the
// instance's, as tier's.
func newBuildRuntime(cfg config.Config, log *slog.Logger, instance string, tier tiers.Tier) (sandbox.Runtime, error) {
	if tier.BuildSteps || !tier.BuildElsewhere {
		return nil, nil
	}
	h := tierHost(cfg, log, instance)
	bt, err := tiers.ChooseBuild(tier, h)
	if err != nil {
		log.Warn("no tier here runs image build steps: images with run steps fail to build", "tier", tier.Name, "why", err)
		return nil, nil
	}
	log.Info("image build steps run on another tier", "build_tier", bt.Name, "tier", tier.Name)
	return bt.New(context.Background(), h)
}

// findAgent locates the static helmr-agent binary.
func findAgent(configured string) (string, error) {
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", fmt.Errorf("HELMR_AGENT_PATH: %w", err)
		}
		return filepath.Abs(configured)
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "helmr-agent")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("helmr-agent"); err == nil {
		return filepath.Abs(p)
	}
	return "", errors.New("helmr-agent not found next to helmr or on PATH: build both with `make build` (or set HELMR_AGENT_PATH)")
}

func workerID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%s", host, hex.EncodeToString(b))
}
