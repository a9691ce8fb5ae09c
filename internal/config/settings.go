package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/sandbox/tiers"
)

// Setting is one setting of the helmr binary. The table of them (Settings)
// is the one place a setting is declared: Default, FromEnv, FromFile, the
// CLI's flags, `helmr settings` and the README's settings table all come
// from it.
type Setting struct {
	// Name is the environment variable, also the setting's name in the
	// config file.
	Name string
	// Default is the default in the variable's own syntax; empty is
	// unset. A leading ~/ is the user's home directory.
	Default string
	// Shown is the default as the README's table says it, where Default
	// alone does not (computed, or depending on the verb); empty: Default.
	Shown string
	// Doc says what the setting does, in one line of Markdown.
	Doc string
	// Flag is the command-line flag that sets it (without dashes), on the
	// verbs FlagOn names: command paths such as "dev" or "secret
	// rotate-key", or APIVerbs.
	Flag   string
	FlagOn []string
	// ReadBy says which parts of helmr read it: ControlPlane (helmr dev
	// and helmr server), Worker (helmr dev and helmr worker), CLI (the
	// user verbs).
	ReadBy []string
	// Secret settings are never printed (helmr settings says "set").
	Secret bool
	// field is the Config field the setting fills; nil for a setting read
	// before there is a Config (HELMR_CONFIG).
	field func(*Config) Value
}

// The parts of helmr in a Setting's ReadBy.
const (
	ControlPlane = "control plane"
	Worker       = "worker"
	CLI          = "CLI"
)

// APIVerbs in a Setting's FlagOn stands for every verb that talks to the
// control plane's API.
const APIVerbs = "API verbs"

// Value is a setting's field as the flag packages see it (pflag.Value).
type Value interface {
	String() string
	Set(string) error
	Type() string
}

// Bind returns the field of c the setting fills, or nil if it fills none.
func (s Setting) Bind(c *Config) Value {
	if s.field == nil {
		return nil
	}
	return s.field(c)
}

// ShownDefault is the default as documentation shows it.
func (s Setting) ShownDefault() string {
	switch {
	case s.Shown != "":
		return s.Shown
	case s.Default == "":
		return "unset"
	}
	return "`" + s.Default + "`"
}

// settings is the table, in the order the README lists it.
var settings = []Setting{
	{Name: "HELMR_CONFIG", ReadBy: []string{ControlPlane, Worker, CLI}, Shown: "`/etc/helmr/helmr.conf` if present",
		Doc: "the operator's config file: one `HELMR_NAME=value` per line, with these names and syntax; the environment overrides it"},
	{Name: "HELMR_DATA_DIR", ReadBy: []string{ControlPlane, Worker, CLI}, Default: ".helmr", Flag: "data-dir", FlagOn: []string{"dev", "server", "worker", "secret rotate-key", "image build", "image export"},
		Doc: "data directory: the embedded SQLite store, workspaces, image layers", field: str(func(c *Config) *string { return &c.DataDir })},
	{Name: "HELMR_DATABASE_URL", ReadBy: []string{ControlPlane, CLI}, Secret: true,
		Doc: "PostgreSQL instead of SQLite (`postgres://...`)", field: str(func(c *Config) *string { return &c.DatabaseURL })},
	{Name: "HELMR_ADDR", ReadBy: []string{ControlPlane}, Default: "127.0.0.1:8480", Flag: "addr", FlagOn: []string{"dev", "server"},
		Doc: "listen address of `dev` and `server`", field: str(func(c *Config) *string { return &c.Addr })},
	{Name: "HELMR_METRICS_ADDR", ReadBy: []string{ControlPlane, Worker},
		Doc:   "listen address (`127.0.0.1:9480`) of a separate, unauthenticated listener for Prometheus (`/metrics`) and probes (`/healthz`, `/readyz`) of `dev`, `server` and `worker`; keep it on a private network. Unset: no such listener (the API port serves `/healthz` and `/readyz` still)",
		field: str(func(c *Config) *string { return &c.MetricsAddr })},
	{Name: "HELMR_URL", ReadBy: []string{Worker, CLI}, Default: "http://127.0.0.1:8480", Shown: "profile, then `http://127.0.0.1:8480`", Flag: "url", FlagOn: []string{APIVerbs},
		Doc: "control plane the CLI talks to, and `helmr worker --control-url`'s default", field: str(func(c *Config) *string { return &c.URL })},
	{Name: "HELMR_PROJECT", ReadBy: []string{CLI}, Shown: "the last deployed (profile)", Flag: "project", FlagOn: []string{APIVerbs},
		Doc: "project the CLI works in", field: str(func(c *Config) *string { return &c.Project })},
	{Name: "HELMR_ENV", ReadBy: []string{CLI}, Default: "dev", Flag: "env", FlagOn: []string{APIVerbs},
		Doc: "environment of the project the CLI works in", field: str(func(c *Config) *string { return &c.Env })},
	{Name: "HELMR_PROFILE", ReadBy: []string{CLI}, Default: "~/.config/helmr/profile.json",
		Doc: "what the CLI remembers between commands: URL, project, `helmr dev`'s credential (mode 0600)", field: str(func(c *Config) *string { return &c.Profile })},
	{Name: "HELMR_CACHE_DIR", ReadBy: []string{Worker, CLI}, Default: "~/.cache/helmr",
		Doc: "built-in base images", field: str(func(c *Config) *string { return &c.CacheDir })},
	{Name: "HELMR_WORKER_TOKEN", ReadBy: []string{ControlPlane, Worker}, Secret: true,
		Doc:   "`helmr worker`: its worker credential (`helmr apikey create --worker`) or the shared token; `helmr server`: a shared token any worker may use (not bound to runs)",
		field: str(func(c *Config) *string { return &c.WorkerToken })},
	{Name: "HELMR_OWNER_TOKEN", ReadBy: []string{ControlPlane}, Secret: true, Shown: "`helmr dev`: `DATA_DIR/owner.token`, made on first start; `helmr server`: required",
		Doc: "the API's owner credential (32+ characters)", field: str(func(c *Config) *string { return &c.OwnerToken })},
	{Name: "HELMR_OWNER_TOKEN_FILE", ReadBy: []string{ControlPlane},
		Doc: "a file holding the owner credential, instead of `HELMR_OWNER_TOKEN`", field: str(func(c *Config) *string { return &c.OwnerTokenFile })},
	{Name: "HELMR_SESSION_TTL", ReadBy: []string{ControlPlane}, Default: "12h",
		Doc:   "how long a console sign-in lasts (1m to 720h); a session of an API key ends no later than the key",
		field: dur(func(c *Config) *time.Duration { return &c.SessionTTL })},
	{Name: "HELMR_API_KEY", ReadBy: []string{CLI}, Secret: true, Shown: "the profile's credential",
		Doc: "what the CLI authenticates with: an API key or the owner credential", field: str(func(c *Config) *string { return &c.APIKey })},
	{Name: "HELMR_RUNTIME", ReadBy: []string{Worker, CLI}, Default: "auto", Flag: "runtime", FlagOn: []string{"dev", "worker", "doctor", "image build", "image export"},
		Doc:   "isolation tier policy: `auto` (strongest that works here) or a tier: " + tiers.PolicyDoc() + "; `helmr doctor` shows each tier and why it is or isn't available",
		field: str(func(c *Config) *string { return &c.Runtime })},
	{Name: "HELMR_MICROVM_VMM", ReadBy: []string{Worker, CLI}, Default: "auto",
		Doc:   "the `microvm` tier's VMM: `qemu` (QEMU's microvm machine, under KVM or, where KVM boots no stock kernel, TCG emulation), `firecracker` (jailed, under KVM only; 1.8 or later, its binaries in `PATH` or `$HELMR_CACHE_DIR/bin`) or `auto`: Firecracker where it is installed and `/dev/kvm` boots a stock kernel, else QEMU; `helmr doctor` says which and why",
		field: str(func(c *Config) *string { return &c.MicroVMVMM })},
	{Name: "HELMR_EGRESS", ReadBy: []string{Worker, CLI}, Default: "open", Flag: "egress", FlagOn: []string{"dev", "worker", "doctor"},
		Doc:   "sandbox egress policy: `open`, `none` or `allow:CIDR,IP,DOMAIN,*.DOMAIN,...` (see Networking and egress)",
		field: str(func(c *Config) *string { return &c.Egress })},
	{Name: "HELMR_SLOTS", ReadBy: []string{Worker}, Default: "4", Flag: "slots", FlagOn: []string{"dev", "worker"},
		Doc: "runs a worker executes at once (1 to 1024)", field: num(func(c *Config) *int { return &c.Slots })},
	{Name: "HELMR_WORKSPACE_QUOTA", ReadBy: []string{Worker, CLI}, Default: "10Gi",
		Doc: "size limit of each run's workspace (its own ext4 disk); `0`: none, plain directories (not on the `microvm` tier, whose guests take workspaces as disks)", field: str(func(c *Config) *string { return &c.WorkspaceQuota })},
	{Name: "HELMR_ROOT_SIZE", ReadBy: []string{Worker}, Default: "1Gi",
		Doc:   "bound of what a sandbox writes to its root outside the workspace (a copy-on-write layer over its image, discarded with it; past it, ENOSPC), for tasks whose sandbox declares no `rootSize`; the process tier keeps the layer in the sandbox's memory, gVisor on the disk of `HELMR_STATE_DIR`, a microVM in its guest's memory",
		field: str(func(c *Config) *string { return &c.RootSize })},
	{Name: "HELMR_LAYER_CACHE", ReadBy: []string{Worker}, Default: "20Gi",
		Doc:   "size bound of the worker's image layer cache: after runs, least recently used layers that no sandbox runs on (and no build used in the last 10 minutes) are removed; `0`: no bound",
		field: str(func(c *Config) *string { return &c.LayerCache })},
	{Name: "HELMR_MASTER_KEY", ReadBy: []string{ControlPlane, CLI}, Secret: true, Shown: "`helmr dev`: `DATA_DIR/master.key`, made on first start",
		Doc: "the vault's master key (base64 of 32 bytes)", field: str(func(c *Config) *string { return &c.MasterKey })},
	{Name: "HELMR_MASTER_KEY_FILE", ReadBy: []string{ControlPlane, CLI},
		Doc: "a file holding the vault's master key, instead of `HELMR_MASTER_KEY`", field: str(func(c *Config) *string { return &c.MasterKeyFile })},
	{Name: "HELMR_EXTRA_CA_CERTS", ReadBy: []string{Worker, CLI},
		Doc: "PEM file of CA certificates that build steps' Node.js tools trust (`NODE_EXTRA_CA_CERTS`)", field: str(func(c *Config) *string { return &c.ExtraCACerts })},
	{Name: "HELMR_EGRESS_CA_CERTS", ReadBy: []string{Worker, CLI}, Shown: "the host's system roots",
		Doc: "PEM file of more CA certificates the worker trusts, beside the host's system roots, when it verifies the real upstream of a connection it intercepts to put an egress-bound secret in (a private CA, a TLS-inspecting proxy)", field: str(func(c *Config) *string { return &c.EgressCACerts })},
	{Name: "HELMR_DNS_UPSTREAM", ReadBy: []string{Worker, CLI}, Shown: "the host's `/etc/resolv.conf`",
		Doc: "resolvers the sandboxes' DNS is forwarded to: `IP[:port],...`", field: str(func(c *Config) *string { return &c.DNSUpstream })},
	{Name: "HELMR_ENV_CONCURRENCY", ReadBy: []string{ControlPlane}, Default: "0",
		Doc:   "how many task runs of one project environment may be started (or waiting with their sandbox up) at once, across all its queues; `0`: no bound (queues' own limits still hold)",
		field: num(func(c *Config) *int { return &c.EnvConcurrency })},
	{Name: "HELMR_WORKER_TTL", ReadBy: []string{ControlPlane}, Default: "60s",
		Doc:   "a worker silent this long (no heartbeat, no request for work) loses its started runs: those it had not started go back to the queue, the others fail as `guest_runtime` and are retried per their retry policy (from their checkpoint if they were restored from one); once every worker of a host is, that host's workspaces with a snapshot move to any worker",
		field: dur(func(c *Config) *time.Duration { return &c.WorkerTTL })},
	{Name: "HELMR_HEARTBEAT", ReadBy: []string{Worker, ControlPlane}, Default: "10s",
		Doc: "how often a worker reports it is alive; the control plane refuses a `HELMR_WORKER_TTL` under twice it, so set both alike", field: dur(func(c *Config) *time.Duration { return &c.Heartbeat })},
	{Name: "HELMR_PARK_AFTER", ReadBy: []string{Worker}, Default: "30s",
		Doc:   "a run waiting this long is parked (its sandbox checkpointed, its slot freed) on tiers that can checkpoint; `0`: never",
		field: dur(func(c *Config) *time.Duration { return &c.ParkAfter })},
	{Name: "HELMR_CHECKPOINT_ENCRYPTION_KEY", ReadBy: []string{Worker}, Secret: true,
		Shown: "`helmr dev`: `DATA_DIR/checkpoint.key`, made on first start; `helmr worker`: required to park, and to save or restore workspace snapshots",
		Doc:   "seals parked runs' checkpoints and workspace snapshots (base64 of 32 bytes, the same on every worker)",
		field: str(func(c *Config) *string { return &c.CheckpointKey })},
	{Name: "HELMR_BLOB_URL", ReadBy: []string{ControlPlane}, Shown: "`DATA_DIR/blobs`",
		Doc:   "where the control plane keeps blobs (parked runs' checkpoints, workspace snapshots, sealed by the workers): `s3://BUCKET[/PREFIX]` in S3-compatible object storage, which every replica must share; unset, files in the data directory",
		field: str(func(c *Config) *string { return &c.BlobURL })},
	{Name: "HELMR_S3_ENDPOINT", ReadBy: []string{ControlPlane}, Shown: "AWS S3",
		Doc: "the S3 server of `HELMR_BLOB_URL`: `http(s)://HOST[:PORT]` (SeaweedFS, MinIO, Ceph, R2...)", field: str(func(c *Config) *string { return &c.S3Endpoint })},
	{Name: "HELMR_S3_REGION", ReadBy: []string{ControlPlane}, Shown: "asked of the server",
		Doc: "the bucket's region", field: str(func(c *Config) *string { return &c.S3Region })},
	{Name: "HELMR_S3_ACCESS_KEY", ReadBy: []string{ControlPlane}, Shown: "`AWS_ACCESS_KEY_ID`",
		Doc: "access key of `HELMR_BLOB_URL`'s bucket (with `HELMR_S3_SECRET_KEY`; else `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`; neither: anonymous)", field: str(func(c *Config) *string { return &c.S3AccessKey })},
	{Name: "HELMR_S3_SECRET_KEY", ReadBy: []string{ControlPlane}, Secret: true, Shown: "`AWS_SECRET_ACCESS_KEY`",
		Doc: "secret key of `HELMR_BLOB_URL`'s bucket", field: str(func(c *Config) *string { return &c.S3SecretKey })},
	{Name: "HELMR_S3_SESSION_TOKEN", ReadBy: []string{ControlPlane}, Secret: true, Shown: "`AWS_SESSION_TOKEN`",
		Doc: "session token of temporary S3 credentials", field: str(func(c *Config) *string { return &c.S3SessionToken })},
	{Name: "HELMR_S3_PATH_STYLE", ReadBy: []string{ControlPlane}, Default: "auto",
		Doc: "address the bucket in the URL's path (`true`, what self-hosted servers want) or in its host name (`false`); `auto`: path-style when `HELMR_S3_ENDPOINT` is set", field: str(func(c *Config) *string { return &c.S3PathStyle })},
	{Name: "HELMR_S3_PART_SIZE", ReadBy: []string{ControlPlane}, Default: "8Mi",
		Doc: "part size of the multipart uploads of blobs to S3 (5Mi to 5Gi): a blob larger than one part goes up in parts, four at a time, so an upload holds up to four parts in memory; at most 10,000 parts (78 GiB at 8Mi)", field: str(func(c *Config) *string { return &c.S3PartSize })},
	{Name: "HELMR_KEEP_MOVED", ReadBy: []string{Worker}, Default: "24h",
		Doc:   "how long a worker keeps its copy of a workspace that moved to another host, after the copy was last saved or restored; `0s`: removed at the next sweep (copies with unsaved changes always stay)",
		field: dur(func(c *Config) *time.Duration { return &c.KeepMoved })},
	{Name: "HELMR_WORKSPACE_IDLE", ReadBy: []string{Worker}, Default: "5m",
		Doc:   "how long a workspace's sandbox for direct operations (`helmr exec`, files, SWE-ReX) stays up after its last operation (1s to 24h)",
		field: dur(func(c *Config) *time.Duration { return &c.WorkspaceIdle })},
	{Name: "HELMR_TERMINAL_IDLE", ReadBy: []string{ControlPlane}, Default: "10m",
		Doc:   "a workspace terminal (the console's) with no input and no reader for this long is closed (1m to 24h)",
		field: dur(func(c *Config) *time.Duration { return &c.TerminalIdle })},
	{Name: "HELMR_SHELL_IDLE", ReadBy: []string{Worker}, Default: "30m",
		Doc:   "how long a workspace's shell session (a SWE-ReX session) lives after its last command; an open session keeps the workspace's sandbox up (1s to 24h)",
		field: dur(func(c *Config) *time.Duration { return &c.ShellIdle })},
	{Name: "HELMR_WARM", ReadBy: []string{Worker}, Default: "1",
		Doc:   "sandboxes a worker keeps booted ahead of runs (per image and resources, most recently used); also turns on the sandboxes started ahead for new workspaces (E2B sandboxes), as many as recent demand asks (at most 16); `0` boots each on demand",
		field: num(func(c *Config) *int { return &c.Warm })},
	{Name: "HELMR_AGENT_PATH", ReadBy: []string{Worker, CLI}, Shown: "next to `helmr`",
		Doc: "the static `helmr-agent` binary", field: str(func(c *Config) *string { return &c.AgentPath })},
	{Name: "HELMR_RUNSC", ReadBy: []string{Worker, CLI}, Shown: "`$HELMR_CACHE_DIR/bin/runsc`",
		Doc: "gVisor's `runsc` (built by `scripts/install-runsc.sh`)", field: str(func(c *Config) *string { return &c.RunscPath })},
	{Name: "HELMR_STATE_DIR", ReadBy: []string{Worker, CLI}, Default: tiers.DefaultStateRoot,
		Doc:   "the isolation tiers' state on this host: each tier keeps its own below it (`microvm/`, `gvisor/`, `sandboxes/`), one directory per worker; made with the modes each tier needs, whichever tier runs first",
		field: str(func(c *Config) *string { return &c.StateDir })},
	{Name: "HELMR_SANDBOX_DIR", ReadBy: []string{Worker, CLI}, Shown: "`$HELMR_STATE_DIR/sandboxes`",
		Doc: "the process tier's scratch state (its parents must be searchable by the sandbox's host uid)", field: str(func(c *Config) *string { return &c.SandboxDir })},
	{Name: "HELMR_NODE", ReadBy: []string{CLI}, Default: "node",
		Doc: "the Node.js that `helmr deploy` and `helmr image` bundle and index task projects with", field: str(func(c *Config) *string { return &c.Node })},
	{Name: "HELMR_OTLP_ENDPOINT", ReadBy: []string{ControlPlane},
		Doc: "OTLP/HTTP collector (`http://host:4318`) that runs (queued to finished) and workspace operations are exported to as spans", field: str(func(c *Config) *string { return &c.OTLPEndpoint })},
}

// Settings returns the table of settings.
func Settings() []Setting { return slices.Clone(settings) }

// Lookup returns the setting named name (HELMR_...).
func Lookup(name string) (Setting, bool) {
	i := slices.IndexFunc(settings, func(s Setting) bool { return s.Name == name })
	if i < 0 {
		return Setting{}, false
	}
	return settings[i], true
}

// Default returns the defaults.
func Default() Config {
	var c Config
	home, _ := os.UserHomeDir()
	for _, s := range settings {
		v := s.Bind(&c)
		if v == nil || s.Default == "" {
			continue
		}
		d := s.Default
		if rest, ok := strings.CutPrefix(d, "~/"); ok {
			d = filepath.Join(home, rest)
		}
		if err := v.Set(d); err != nil {
			panic(fmt.Sprintf("config: the default of %s: %v", s.Name, err)) // a bug in the table; TestTable catches it
		}
	}
	return c
}

// FromEnv applies HELMR_* environment variables over c.
func (c Config) FromEnv(getenv func(string) string) (Config, error) {
	for _, s := range settings {
		v := s.Bind(&c)
		if v == nil {
			continue
		}
		if val := getenv(s.Name); val != "" {
			if err := v.Set(val); err != nil {
				return c, fmt.Errorf("%s=%q: %w", s.Name, val, err)
			}
		}
	}
	// The AWS tools' variables, when no S3 keys of ours are set.
	if c.S3AccessKey == "" && c.S3SecretKey == "" {
		c.S3AccessKey, c.S3SecretKey = getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY")
		if c.S3SessionToken == "" {
			c.S3SessionToken = getenv("AWS_SESSION_TOKEN")
		}
	}
	return c, nil
}

type stringValue struct{ p *string }

func str(f func(*Config) *string) func(*Config) Value {
	return func(c *Config) Value { return stringValue{f(c)} }
}

func (v stringValue) String() string     { return *v.p }
func (v stringValue) Set(s string) error { *v.p = s; return nil }
func (v stringValue) Type() string       { return "string" }

type intValue struct{ p *int }

func num(f func(*Config) *int) func(*Config) Value {
	return func(c *Config) Value { return intValue{f(c)} }
}

func (v intValue) String() string { return strconv.Itoa(*v.p) }
func (v intValue) Type() string   { return "int" }

func (v intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not a number")
	}
	*v.p = n
	return nil
}

type durationValue struct{ p *time.Duration }

func dur(f func(*Config) *time.Duration) func(*Config) Value {
	return func(c *Config) Value { return durationValue{f(c)} }
}

func (v durationValue) String() string { return v.p.String() }
func (v durationValue) Type() string   { return "duration" }

func (v durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (like 30s)")
	}
	*v.p = d
	return nil
}

// FlagDoc says which flag sets the setting, and on which verbs, in
// Markdown; empty if none does.
func (s Setting) FlagDoc() string {
	if s.Flag == "" {
		return ""
	}
	on := make([]string, len(s.FlagOn))
	for i, v := range s.FlagOn {
		on[i] = "`" + v + "`"
		if v == APIVerbs {
			on[i] = "every verb that calls the API"
		}
	}
	return fmt.Sprintf("`--%s` (%s)", s.Flag, strings.Join(on, ", "))
}

// MarkdownTable is the table of settings as README.md shows it.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning | read by | flag |\n|---|---|---|---|---|\n")
	for _, s := range settings {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", s.Name, s.ShownDefault(), s.Doc, strings.Join(s.ReadBy, ", "), s.FlagDoc())
	}
	return b.String()
}
