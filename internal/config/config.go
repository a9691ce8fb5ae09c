// Package config holds the settings of the helmr binary: defaults, then
// the operator's config file, then environment variables, then flags
// (applied by the CLI), then Validate. One table (Settings) declares every
// setting. No other package reads the environment.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/blobs/s3"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/sandbox/disk"
	"github.com/helmr/helmr/internal/sandbox/microvm"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/sandbox/tiers"
)

// Config is every setting of the helmr binary.
type Config struct {
	// Control plane and worker.
	Addr           string        // listen address of dev/server
	MetricsAddr    string        // listen address of /metrics, /healthz and /readyz; empty: none
	DataDir        string        // embedded store, blobs, workspaces ($HELMR_DATA_DIR)
	DatabaseURL    string        // PostgreSQL; empty means SQLite under DataDir
	CacheDir       string        // built-in base images and layers ($HELMR_CACHE_DIR)
	WorkerToken    string        // shared secret of remote workers
	AgentPath      string        // static helmr-agent binary
	RunscPath      string        // gVisor's runsc; default: $CacheDir/bin/runsc (scripts/install-runsc.sh)
	StateDir       string        // the isolation tiers' state root; each keeps its own below it ($HELMR_STATE_DIR)
	SandboxDir     string        // the process tier's state; default $StateDir/sandboxes; every parent must be searchable by others
	Runtime        string        // isolation tier: auto, microvm, gvisor or process
	MicroVMVMM     string        // the microvm tier's VMM: auto, qemu or firecracker
	Egress         string        // sandbox egress policy: open, none or allow:LIST (network.ParsePolicy)
	WorkspaceQuota string        // size limit of each run's workspace (10Gi); 0: none
	RootSize       string        // bound of a sandbox's writable root when its task declares none (1Gi)
	DNSUpstream    string        // resolvers sandboxes' DNS goes to: IP[:port],...; empty: the host's resolv.conf
	ExtraCACerts   string        // PEM file of CA certificates build steps trust (a TLS-inspecting proxy)
	EgressCACerts  string        // PEM file of CA certificates the worker trusts for intercepted upstreams
	LayerCache     string        // size bound of the image layer cache (20Gi); 0: none
	MasterKey      string        // the vault's master key, base64 of 32 bytes ($HELMR_MASTER_KEY)
	MasterKeyFile  string        // or a file holding it ($HELMR_MASTER_KEY_FILE)
	OwnerToken     string        // the owner credential of the API ($HELMR_OWNER_TOKEN)
	OwnerTokenFile string        // or a file holding it ($HELMR_OWNER_TOKEN_FILE)
	SessionTTL     time.Duration // how long a console sign-in lasts ($HELMR_SESSION_TTL)
	Slots          int           // runs a worker executes at once
	Warm           int           // sandboxes kept booted ahead of runs (per image and resources)
	WorkerTTL      time.Duration // a worker silent this long loses its started runs
	EnvConcurrency int           // task runs of one project environment holding a slot at once (0: no bound)
	Heartbeat      time.Duration // how often a worker reports it is alive
	Node           string        // host node used by deploy
	OTLPEndpoint   string        // OTLP/HTTP collector for run and workspace operation spans (http://host:4318); empty: none
	ParkAfter      time.Duration // a run WAITING this long is parked (checkpointed, its slot freed); 0: never
	WorkspaceIdle  time.Duration // a workspace's sandbox for direct operations stays up this long after its last one
	ShellIdle      time.Duration // a workspace's shell session lives this long after its last command
	TerminalIdle   time.Duration // a workspace terminal without input or reader is closed after this long
	KeepMoved      time.Duration // a worker keeps its copy of a workspace that moved away this long after its last use
	CheckpointKey  string        // seals checkpoints: base64 of 32 bytes ($HELMR_CHECKPOINT_ENCRYPTION_KEY)
	BlobURL        string        // s3://BUCKET[/PREFIX] for blobs; empty: DATA_DIR/blobs
	S3Endpoint     string        // the S3 server's http(s):// URL; empty: AWS
	S3Region       string        // the bucket's region; empty: asked
	S3AccessKey    string        // or $AWS_ACCESS_KEY_ID
	S3SecretKey    string        // or $AWS_SECRET_ACCESS_KEY
	S3SessionToken string        // of temporary credentials, or $AWS_SESSION_TOKEN
	S3PathStyle    string        // auto (path-style when S3Endpoint is set), true or false
	S3PartSize     string        // multipart part size (16Mi)

	// CLI.
	APIKey  string // credential the CLI sends: an API key or the owner credential ($HELMR_API_KEY)
	URL     string // control plane URL
	Project string
	Env     string
	Profile string // path of the CLI profile file
}

// DefaultFile is the operator's config file read when HELMR_CONFIG is not
// set (and skipped if it does not exist).
const DefaultFile = "/etc/helmr/helmr.conf"

// FromFile applies an operator's config file over c: one HELMR_NAME=value
// per line with the environment variables' names and syntax ('#' starts a
// comment line; the value may be quoted). Precedence: defaults, the file,
// the environment, flags. An unknown name is an error naming its line.
func (c Config) FromFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("config file: %w", err)
	}
	vals, lines := map[string]string{}, map[string]int{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !strings.HasPrefix(k, "HELMR_") {
			return c, fmt.Errorf("config file %s:%d: want HELMR_NAME=value, got %q", path, i+1, line)
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		vals[k], lines[k] = v, i+1
	}
	for _, k := range slices.SortedFunc(maps.Keys(vals), func(a, b string) int { return lines[a] - lines[b] }) {
		if _, ok := Lookup(k); !ok {
			return c, fmt.Errorf("config file %s:%d: unknown setting %s", path, lines[k], k)
		}
	}
	out, err := c.FromEnv(func(k string) string { return vals[k] })
	if err != nil {
		return c, fmt.Errorf("config file %s: %w", path, err)
	}
	return out, nil
}

// Load is the settings the binary starts with: defaults, then the config
// file (HELMR_CONFIG, else DefaultFile if present), then the environment.
func Load(getenv func(string) string) (Config, error) {
	c := Default()
	if path := File(getenv); path != "" {
		var err error
		if c, err = c.FromFile(path); err != nil {
			return c, err
		}
	}
	return c.FromEnv(getenv)
}

// File is the config file Load reads: HELMR_CONFIG, else DefaultFile if
// it exists; empty if none.
func File(getenv func(string) string) string {
	if path := getenv("HELMR_CONFIG"); path != "" {
		return path
	}
	if _, err := os.Stat(DefaultFile); err == nil {
		return DefaultFile
	}
	return ""
}

// Validate checks the settings a server or worker needs.
func (c Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is empty"))
	}
	if c.Slots < 1 || c.Slots > 1024 {
		errs = append(errs, fmt.Errorf("slots must be 1..1024, got %d", c.Slots))
	}
	if c.SessionTTL < time.Minute || c.SessionTTL > 720*time.Hour {
		errs = append(errs, fmt.Errorf("HELMR_SESSION_TTL (%s) must be between 1m and 720h", c.SessionTTL))
	}
	if c.Heartbeat <= 0 || c.WorkerTTL < 2*c.Heartbeat {
		errs = append(errs, fmt.Errorf("the worker TTL (%s) must be at least twice the heartbeat interval (%s)", c.WorkerTTL, c.Heartbeat))
	}
	if c.ParkAfter < 0 {
		errs = append(errs, fmt.Errorf("HELMR_PARK_AFTER must not be negative, got %s", c.ParkAfter))
	}
	if c.KeepMoved < 0 {
		errs = append(errs, fmt.Errorf("HELMR_KEEP_MOVED must not be negative, got %s", c.KeepMoved))
	}
	if c.TerminalIdle < time.Minute || c.TerminalIdle > 24*time.Hour {
		errs = append(errs, fmt.Errorf("HELMR_TERMINAL_IDLE must be between 1m and 24h, got %s", c.TerminalIdle))
	}
	if c.ShellIdle < time.Second || c.ShellIdle > 24*time.Hour {
		errs = append(errs, fmt.Errorf("HELMR_SHELL_IDLE must be between 1s and 24h, got %s", c.ShellIdle))
	}
	if c.WorkspaceIdle < time.Second || c.WorkspaceIdle > 24*time.Hour {
		errs = append(errs, fmt.Errorf("HELMR_WORKSPACE_IDLE must be between 1s and 24h, got %s", c.WorkspaceIdle))
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("HELMR_METRICS_ADDR (%q) must be host:port: %w", c.MetricsAddr, err))
		}
	}
	if c.Warm < 0 || c.Warm > 64 {
		errs = append(errs, fmt.Errorf("warm sandboxes must be 0..64, got %d", c.Warm))
	}
	if err := tiers.CheckPolicy(c.Runtime); err != nil {
		errs = append(errs, err)
	}
	if err := microvm.CheckVMM(c.MicroVMVMM); err != nil {
		errs = append(errs, fmt.Errorf("HELMR_MICROVM_VMM: %w", err))
	}
	if !filepath.IsAbs(c.StateDir) || c.SandboxDir != "" && !filepath.IsAbs(c.SandboxDir) {
		errs = append(errs, fmt.Errorf("HELMR_STATE_DIR (%q) and HELMR_SANDBOX_DIR (%q) must be absolute paths", c.StateDir, c.SandboxDir))
	}
	if _, err := network.ParsePolicy(c.Egress); err != nil {
		errs = append(errs, err)
	}
	if _, err := network.ParseUpstreams(c.DNSUpstream); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.WorkspaceQuotaBytes(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.LayerCacheBytes(); err != nil {
		errs = append(errs, err)
	}
	if _, err := c.RootSizeBytes(); err != nil {
		errs = append(errs, err)
	}
	if c.BlobURL != "" {
		if _, err := c.S3Blobs(); err != nil {
			errs = append(errs, err)
		}
	}
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		errs = append(errs, fmt.Errorf("control plane URL %q must be http(s)", c.URL))
	}
	return errors.Join(errs...)
}

// S3Blobs is the S3 engine's configuration (BlobURL is set), validated.
func (c Config) S3Blobs() (s3.Config, error) {
	part, err := parseSize("HELMR_S3_PART_SIZE", c.S3PartSize)
	if err != nil {
		return s3.Config{}, err
	}
	var pathStyle bool
	switch c.S3PathStyle {
	case "auto", "":
		pathStyle = c.S3Endpoint != ""
	case "true":
		pathStyle = true
	case "false":
	default:
		return s3.Config{}, fmt.Errorf("HELMR_S3_PATH_STYLE must be auto, true or false, got %q", c.S3PathStyle)
	}
	sc := s3.Config{URL: c.BlobURL, Endpoint: c.S3Endpoint, Region: c.S3Region, AccessKey: c.S3AccessKey,
		SecretKey: c.S3SecretKey, SessionToken: c.S3SessionToken, PathStyle: pathStyle, PartSize: part}
	if err := sc.Validate(); err != nil {
		return s3.Config{}, fmt.Errorf("HELMR_BLOB_URL: %w", err)
	}
	return sc, nil
}

// WorkspaceQuotaBytes parses WorkspaceQuota: 0 (none) or at least
// disk.MinSize.
func (c Config) WorkspaceQuotaBytes() (int64, error) {
	n, err := parseSize("workspace quota", c.WorkspaceQuota)
	if err == nil && n > 0 && n < disk.MinSize {
		err = fmt.Errorf("workspace quota %s is below the minimum of %dMi (0 turns the quota off)", c.WorkspaceQuota, disk.MinSize>>20)
	}
	return n, err
}

// RootSizeBytes parses RootSize (deployments.ParseRootSize): a root is
// always bounded.
func (c Config) RootSizeBytes() (int64, error) {
	return deployments.ParseRootSize("HELMR_ROOT_SIZE", c.RootSize)
}

// LayerCacheBytes parses LayerCache: 0 means no bound.
func (c Config) LayerCacheBytes() (int64, error) { return parseSize("layer cache bound", c.LayerCache) }

// parseSize reads a size setting ("10Gi", "512Mi", bytes); "0" or empty is 0.
func parseSize(what, v string) (int64, error) {
	if v == "0" || v == "" {
		return 0, nil
	}
	n, err := deployments.ParseMemory(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %s", what, strings.Replace(err.Error(), "memory ", "", 1))
	}
	return n, nil
}

// Profile is what the CLI remembers between commands. It may hold a
// credential, so it is written with mode 0600.
type Profile struct {
	URL     string `json:"url,omitempty"`
	Project string `json:"project,omitempty"`
	Env     string `json:"env,omitempty"`
	// Credential is sent to URL (and nowhere else): helmr dev writes its
	// owner credential here.
	Credential string `json:"credential,omitempty"`
	Updated    string `json:"updated,omitempty"`
}

// LoadProfile reads the profile; a missing file is an empty profile.
func LoadProfile(path string) (Profile, error) {
	var p Profile
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("profile %s: %w", path, err)
	}
	return p, nil
}

// SaveProfile writes the profile with mode 0600, atomically.
func SaveProfile(path string, p Profile) error {
	p.Updated = time.Now().UTC().Format(time.RFC3339)
	data, _ := json.MarshalIndent(p, "", "  ")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".profile-*.tmp") // mode 0600
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
