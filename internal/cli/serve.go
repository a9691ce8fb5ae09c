package cli

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/checkpoints"
	"github.com/helmr/helmr/internal/config"
	"github.com/helmr/helmr/internal/e2b"
	"github.com/helmr/helmr/internal/e2b/envd"
	"github.com/helmr/helmr/internal/httpapi"
	"github.com/helmr/helmr/internal/metrics"
	"github.com/helmr/helmr/internal/otlp"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/schedules"
	storage "github.com/helmr/helmr/internal/store"
	"github.com/helmr/helmr/internal/store/postgres"
	"github.com/helmr/helmr/internal/store/sqlite"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/waitpoints"
	"github.com/helmr/helmr/internal/workspaces"
)

// store is what the control plane needs from a storage engine.
type store interface {
	storage.Store
	Ping(ctx context.Context) error
	Close() error
}

func openStore(ctx context.Context, cfg config.Config, log *slog.Logger) (store, string, error) {
	if cfg.DatabaseURL != "" {
		s, err := postgres.Open(ctx, cfg.DatabaseURL, log)
		return s, "postgres", err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, "", fmt.Errorf("data dir: %w", err)
	}
	p := filepath.Join(cfg.DataDir, "helmr.db")
	s, err := sqlite.Open(ctx, p, log)
	return s, "sqlite " + p, err
}

// controlPlane is a running control plane.
type controlPlane struct {
	store store
	runs  *runs.Service
	waits *waitpoints.Service
	ops   *workspaces.Ops
	blobs checkpoints.Blobs // sealed checkpoints and snapshots: DATA_DIR/blobs or S3 (openBlobs)
	api   *httpapi.Server
	url   string
	srv   *http.Server
	ln    net.Listener
	// reg holds the process's metrics (a helmr dev's worker adds its
	// own); ready are the control plane's readiness checks.
	reg   *prometheus.Registry
	ready []metrics.Check
	// owner is the owner credential of the API.
	owner string
	// stopWatch ends the goroutines that fail runs of lost workers,
	// expire due waitpoints and fire schedules.
	stopWatch func()
}

func startControlPlane(ctx context.Context, cfg config.Config, dev bool, log *slog.Logger) (*controlPlane, error) {
	owner, err := ownerToken(cfg, dev, log)
	if err != nil {
		return nil, err
	}
	st, desc, err := openStore(ctx, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	v, err := openVault(ctx, cfg, st, dev, log)
	if err != nil {
		st.Close()
		return nil, err
	}
	svc := runs.NewService(st, st, st, runs.NewBroker(), log)
	svc.WorkerTTL = cfg.WorkerTTL
	svc.EnvConcurrency = cfg.EnvConcurrency
	if v != nil {
		svc.Vault = v
	}
	svc.Deployments = st
	svc.Workspaces = st
	waits := waitpoints.NewService(st, svc, log)
	svc.ChildWaits = waits
	blobs, err := openBlobs(ctx, cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	svc.Checkpoints = st
	svc.DropCheckpoints = func(ctx context.Context, runID string) { dropCheckpoints(ctx, st, blobs, runID, log) }
	scheds := schedules.NewService(st, st, svc, log)
	svc.Ended = func(ctx context.Context, r runs.Run) {
		if err := waits.CancelForRun(ctx, r); err != nil {
			log.Warn("cancel the waitpoints of an ended run", "run_id", r.ID, "err", err)
		}
		dropCheckpoints(ctx, st, blobs, r.ID, log)
		if r.Kind == runs.KindBuild && r.Status == runs.StatusCompleted {
			// The built deployment is READY: its schedules apply.
			if _, err := scheds.SyncCurrent(ctx, r.Project, r.Env); err != nil {
				log.Warn("sync declared schedules", "deployment_id", r.DeploymentID, "err", err)
			}
		}
	}
	svc.Retried = func(ctx context.Context, r runs.Run) {
		if err := waits.CancelForRetry(ctx, r); err != nil {
			log.Warn("cancel the waitpoints of a retried attempt", "run_id", r.ID, "err", err)
		}
	}
	// A parked run waits without a worker: when its wait is over, it is
	// queued for a worker to restore.
	waits.Resolved = func(ctx context.Context, w waitpoints.Waitpoint) {
		if _, err := svc.Unpark(ctx, w.ID, string(w.Status)); err != nil {
			log.Warn("queue parked runs for restore", "waitpoint", w.ID, "err", err)
		}
	}
	keys := apikeys.NewService(st, owner, log)
	// Browser sessions are rows of the store: they survive a restart and
	// every replica authenticates them.
	sessions := apikeys.NewSessions(st, keys, cfg.SessionTTL, log)
	ops := workspaces.NewOps()
	ops.Lost = func(ctx context.Context, workerID string) bool {
		lost, err := svc.WorkerLost(ctx, workerID)
		return err == nil && lost
	}
	if desc == "postgres" {
		// Replicas share one database: an operation asked of this one
		// may run on a worker that long-polls another.
		ops.Shared = st
		if _, ok := st.(workspaces.OpNotifier); ok {
			ops.Poll = workspaces.NotifiedOpPoll
		}
		if v != nil {
			ops.Resolve = func(ctx context.Context, op workspaces.Op) (map[string]string, error) {
				vals, _, err := workspaces.SecretsFor(ctx, v, op.Workspace, op.Refs())
				return vals, err
			}
		}
	}
	reg := metrics.NewRegistry()
	cpm := metrics.NewControlPlane(reg, st, log)
	observers := runs.Observers{cpm}
	var spans *otlp.Exporter
	if cfg.OTLPEndpoint != "" {
		if spans, err = otlp.New(cfg.OTLPEndpoint, log); err != nil {
			st.Close()
			return nil, err
		}
		observers = append(observers, spans)
		log.Info("exporting runs and workspace operations as OpenTelemetry spans", "endpoint", cfg.OTLPEndpoint)
	}
	svc.Observer = observers
	wsvc := workspaces.NewService(st, st, svc, ops, log)
	wsvc.TerminalIdle = cfg.TerminalIdle
	wsvc.Trajectories, wsvc.Spans, wsvc.Blobs = st, spans, blobs
	if v != nil {
		wsvc.Vault = v
	}
	// The in-sandbox API (envd) finds each request's sandbox in what the
	// E2B API resolved for it (e2b.ResolveSandbox).
	envdAPI := envd.New(envd.Config{Workspaces: wsvc, Resolve: e2b.ResolveSandbox, Log: log})
	e2bAPI := e2b.New(e2b.Config{Workspaces: wsvc, Sandboxes: st, Tasks: st, Auth: keys, Logger: log, Envd: envdAPI, Resumer: envdAPI, EnvdVersion: envd.EnvdVersion})
	api := httpapi.New(httpapi.Config{Runs: svc, Deployments: st, Workspaces: wsvc, WorkerToken: cfg.WorkerToken, Logger: log, Vault: v, Waits: waits,
		APIKeys: keys, Sessions: sessions, Checkpoints: st, Blobs: blobs, Schedules: scheds, E2B: e2bAPI,
		Doctor: func(context.Context) any { rep, _ := checkHost(cfg); return rep }})
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	url := "http://" + ln.Addr().String()
	waits.BaseURL = url
	// The probes answer on the API's port too, unauthenticated (they
	// tell nothing but up or not); /metrics only on HELMR_METRICS_ADDR.
	ready := []metrics.Check{storeCheck(st)}
	root := http.NewServeMux()
	metrics.HandleHealth(root, log, ready...)
	root.Handle("/", api)
	srv := &http.Server{Handler: cpm.Middleware(root), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server failed", "err", err)
		}
	}()
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		svc.WatchWorkers(wctx, cfg.WorkerTTL/2)
	}()
	expireDone := make(chan struct{})
	go func() {
		defer close(expireDone)
		go svc.WatchTimes(wctx, 250*time.Millisecond) // ends with wctx
		waits.Watch(wctx, time.Second)
	}()
	schedDone := make(chan struct{})
	go func() {
		defer close(schedDone)
		scheds.Run(wctx, time.Second)
	}()
	e2bDone := make(chan struct{})
	go func() {
		defer close(e2bDone)
		e2bAPI.Run(wctx, time.Second) // sandboxes' timeouts
	}()
	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		// Notices of the shared operations queue's changes wake its
		// readers at once; polling stays, slower, for a lost notice.
		if n, ok := ops.Shared.(workspaces.OpNotifier); ok {
			n.ListenOps(wctx, ops.Changed)
		}
	}()
	log.Info("control plane listening", "addr", ln.Addr().String(), "store", desc, "blobs", blobs.String())
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		log.Warn("the API is listening beyond loopback over plain HTTP: credentials cross the network in the clear unless a TLS proxy fronts it")
	}
	return &controlPlane{store: st, runs: svc, waits: waits, ops: ops, blobs: blobs, api: api, url: url, srv: srv, ln: ln, owner: owner, reg: reg, ready: ready,
		stopWatch: func() {
			stopWatch()
			<-watchDone
			<-expireDone
			<-schedDone
			<-e2bDone
			<-listenDone
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			envdAPI.Close(cctx)
			cancel()
			wsvc.CloseTerminals()
			spans.Close()
		}}, nil
}

// Close stops serving and closes the store.
func (c *controlPlane) Close(ctx context.Context) error {
	c.stopWatch()
	err := c.srv.Shutdown(ctx)
	if err != nil {
		c.srv.Close()
	}
	return errors.Join(err, c.store.Close())
}

func (a *App) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(a.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// bootControlPlane validates the settings and starts the control plane.
func (a *App) bootControlPlane(ctx context.Context) (*controlPlane, *slog.Logger, error) {
	if err := a.cfg.Validate(); err != nil {
		return nil, nil, err
	}
	log := a.logger()
	cp, err := startControlPlane(ctx, a.cfg, a.dev, log)
	return cp, log, err
}

func (a *App) serverCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "server",
		Short:   "run the control plane (needs HELMR_OWNER_TOKEN(_FILE); remote workers connect with worker credentials)",
		GroupID: "serve",
		Args:    exactly(0, "usage: helmr server [flags] (no arguments)"),
		RunE:    func(c *cobra.Command, _ []string) error { return runServer(c.Context(), a) },
	}
}

func runServer(ctx context.Context, a *App) error {
	cp, log, err := a.bootControlPlane(ctx)
	if err != nil {
		return err
	}
	stopMetrics, err := serveMetrics(a.cfg.MetricsAddr, cp.reg, a.Stdout, log, cp.ready...)
	if err != nil {
		cp.Close(context.Background())
		return err
	}
	defer stopMetrics()
	fmt.Fprintf(a.Stdout, "Helmr control plane at %s\n", cp.url)
	fmt.Fprintf(a.Stdout, "Sign in to the console at %s/login with the owner credential or an API key\n", cp.url)
	if a.cfg.WorkerToken == "" {
		fmt.Fprintln(a.Stdout, "no HELMR_WORKER_TOKEN set: remote workers connect with worker credentials (helmr apikey create --worker)")
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cp.Close(sctx)
}

// ownerToken is the API's owner credential: the operator's
// (HELMR_OWNER_TOKEN or HELMR_OWNER_TOKEN_FILE), else, for helmr dev only,
// one made at its first start and kept in its data dir (mode 0600). A
// server without one does not start: there is no default.
func ownerToken(cfg config.Config, dev bool, log *slog.Logger) (string, error) {
	switch {
	case cfg.OwnerToken != "" || cfg.OwnerTokenFile != "":
		tok, err := apikeys.LoadOwnerToken(cfg.OwnerToken, cfg.OwnerTokenFile)
		if err != nil {
			return "", fmt.Errorf("HELMR_OWNER_TOKEN(_FILE): %w", err)
		}
		return tok, nil
	case dev:
		return devOwnerToken(filepath.Join(cfg.DataDir, "owner.token"), log)
	}
	return "", errors.New("helmr server needs an owner credential for its API: set HELMR_OWNER_TOKEN_FILE to a file holding at least 32 random characters (head -c32 /dev/urandom | base64 > owner.token), or HELMR_OWNER_TOKEN")
}

// devOwnerToken reads helmr dev's owner credential file, making one first.
func devOwnerToken(path string, log *slog.Logger) (string, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", err
		}
		if err := os.WriteFile(path, []byte(apikeys.NewOwnerToken()+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("write the development owner credential: %w", err)
		}
		log.Info("made an owner credential for the API", "path", path)
	}
	return apikeys.LoadOwnerToken("", path)
}

// openVault opens the secrets vault with the operator's master key. helmr
// dev without one makes a development key in its data dir (mode 0600); a
// server without one runs with the vault off (the secrets endpoints say
// so). A key that does not open the stored data keys stops the start.
func openVault(ctx context.Context, cfg config.Config, st vault.Store, dev bool, log *slog.Logger) (*vault.Vault, error) {
	var key []byte
	var err error
	switch {
	case cfg.MasterKey != "" || cfg.MasterKeyFile != "":
		key, err = vault.LoadMasterKey(cfg.MasterKey, cfg.MasterKeyFile)
	case dev:
		key, err = devMasterKey(filepath.Join(cfg.DataDir, "master.key"), log)
	default:
		log.Warn("no HELMR_MASTER_KEY: the secrets vault is off")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v, err := vault.Open(ctx, st, key)
	if err != nil {
		return nil, fmt.Errorf("open the secrets vault: %w", err)
	}
	return v, nil
}

// devMasterKey reads helmr dev's master key file, making one first.
func devMasterKey(path string, log *slog.Logger) ([]byte, error) {
	if err := devKeyFile(path, "the secrets vault's master key", log); err != nil {
		return nil, err
	}
	return vault.LoadMasterKey("", path)
}

// devKeyFile writes a random key (base64 of 32 bytes) to path, 0600,
// unless the file exists; what names it in the log.
func devKeyFile(path, what string, log *slog.Logger) error {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(k)+"\n"), 0o600); err != nil {
			return fmt.Errorf("write the development key %s: %w", path, err)
		}
		log.Info("made a development key", "key", what, "path", path)
	}
	return nil
}

// dropCheckpoints deletes the checkpoints of a run that ended (a parked run
// canceled while it waited, or one restored that finished) or that is
// retried afresh: nothing will restore them.
func dropCheckpoints(ctx context.Context, st checkpoints.Store, blobs checkpoints.Blobs, runID string, log *slog.Logger) {
	cks, err := st.ListCheckpoints(ctx, checkpoints.Filter{RunID: runID})
	if err != nil {
		log.Warn("list the checkpoints of an ended run", "run_id", runID, "err", err)
		return
	}
	for _, ck := range cks {
		if err := errors.Join(st.DeleteCheckpoint(ctx, ck.ID), blobs.Delete(ctx, ck.ID)); err != nil {
			log.Warn("delete the checkpoint of an ended run", "run_id", runID, "checkpoint", ck.ID, "err", err)
		}
	}
}
