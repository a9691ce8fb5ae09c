// Package apikeys holds the control plane's credentials: API keys, each
// scoped to one project environment with explicit grants, stored only as
// the SHA-256 hash of their secret, with expiry, revocation and a
// last-used time; the owner credential, which holds every grant on every
// project; the Principal an authenticated request acts as; and browser
// sessions (Sessions), each standing for the owner or one API key.
//
// Workers authenticate with worker credentials (hw_<id>_<secret>), kept
// alongside: a worker credential acts only as worker IDs <id>.<suffix> and
// only on the runs such a worker holds.
//
// A key reads hk_<id>_<secret>: the id finds the stored key, the secret
// (256 random bits) is compared by hash in constant time. A high-entropy
// secret needs no slow password hash.
package apikeys

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// Grant is a permission an API key carries.
type Grant string

// The grants. Each API route declares the one it needs (see httpapi).
const (
	RunsCreate          Grant = "runs:create"           // trigger runs
	RunsRead            Grant = "runs:read"             // runs, their events and streams
	RunsManage          Grant = "runs:manage"           // cancel runs
	SessionStreamsRead  Grant = "session-streams:read"  // read a run's session streams
	SessionInputSend    Grant = "session-input:send"    // send input to a run's session
	SessionOutputAppend Grant = "session-output:append" // append to a run's session output
	TokensCreate        Grant = "tokens:create"         // create wait tokens
	TokensRead          Grant = "tokens:read"           // read wait tokens
	TokensComplete      Grant = "tokens:complete"       // complete wait tokens
	TokensCancel        Grant = "tokens:cancel"         // cancel wait tokens
	SecretsWrite        Grant = "secrets:write"         // set, list (metadata) and delete secrets; never read values
	TasksDeploy         Grant = "tasks:deploy"          // upload deployments
	TasksRead           Grant = "tasks:read"            // read deployments and tasks
	SchedulesRead       Grant = "schedules:read"        // list and read schedules
	SchedulesManage     Grant = "schedules:manage"      // create, update, (de)activate and delete schedules
	WorkspacesRead      Grant = "workspaces:read"       // list and read workspaces
	WorkspacesManage    Grant = "workspaces:manage"     // delete workspaces
	WorkspacesExec      Grant = "workspaces:exec"       // run commands in workspaces (direct operations)
)

// Grants lists every grant, in the order help and listings show them.
var Grants = []Grant{
	RunsCreate, RunsRead, RunsManage,
	SessionStreamsRead, SessionInputSend, SessionOutputAppend,
	TokensCreate, TokensRead, TokensComplete, TokensCancel,
	SecretsWrite, TasksDeploy, TasksRead,
	SchedulesRead, SchedulesManage,
	WorkspacesRead, WorkspacesManage, WorkspacesExec,
}

// Valid reports whether g is a known grant.
func (g Grant) Valid() bool { return slices.Contains(Grants, g) }

// ParseGrants checks a list of grant names ("runs:read", ...): at least
// one, each known. The result is deduplicated, in the order of Grants.
func ParseGrants(names []string) ([]Grant, error) {
	gs, err := parseGrants(names)
	if err != nil {
		return nil, errdefs.Invalidf("API key request: %w", err)
	}
	return gs, nil
}

func parseGrants(names []string) ([]Grant, error) {
	seen := map[Grant]bool{}
	for _, n := range names {
		g := Grant(n)
		if !g.Valid() {
			return nil, fmt.Errorf("unknown grant %q (known: %s)", n, grantList())
		}
		seen[g] = true
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("an API key needs at least one grant (known: %s)", grantList())
	}
	var out []Grant
	for _, g := range Grants {
		if seen[g] {
			out = append(out, g)
		}
	}
	return out, nil
}

func grantList() string {
	s := make([]string, len(Grants))
	for i, g := range Grants {
		s[i] = string(g)
	}
	return strings.Join(s, ", ")
}

// Kind tells API keys from worker credentials.
type Kind string

// The kinds of key.
const (
	// KindAPI: an API key of one project environment, with grants.
	KindAPI Kind = "api"
	// KindWorker: a worker credential. It leases runs and reports on the
	// runs it holds, and has no project environment or grants.
	KindWorker Kind = "worker"
)

// Key is an API key or a worker credential as stored: never its secret,
// only the secret's hash.
type Key struct {
	ID      string  `json:"id"`
	Kind    Kind    `json:"kind"`
	Project string  `json:"project,omitempty"`
	Env     string  `json:"env,omitempty"`
	Name    string  `json:"name,omitempty"`
	Grants  []Grant `json:"grants"`
	// SecretHash is SHA-256 of the key's secret; never shown.
	SecretHash []byte     `json:"-"`
	CreatedAt  time.Time  `json:"createdAt"`
	ExpiresAt  *time.Time `json:"expiresAt,omitempty"`
	RevokedAt  *time.Time `json:"revokedAt,omitempty"`
	LastUsedAt *time.Time `json:"lastUsedAt,omitempty"`
}

// TouchInterval is how stale a key's last-used time may get: a key in
// use has it written at most once per interval.
const TouchInterval = time.Minute

// Store keeps API keys.
type Store interface {
	// CreateAPIKey stores a new key (its ID set by the caller).
	CreateAPIKey(ctx context.Context, k Key) error
	// GetAPIKey returns the key with id, or errdefs.ErrNotFound.
	GetAPIKey(ctx context.Context, id string) (Key, error)
	// ListAPIKeys returns every key, oldest first.
	ListAPIKeys(ctx context.Context) ([]Key, error)
	// RevokeAPIKey marks the key revoked at at and returns it; a key
	// revoked before keeps its first revocation time. errdefs.ErrNotFound for an
	// unknown id.
	RevokeAPIKey(ctx context.Context, id string, at time.Time) (Key, error)
	// TouchAPIKey sets the key's last-used time to at, unless it is
	// already within TouchInterval before at; it reports whether it
	// wrote. An unknown id writes nothing.
	TouchAPIKey(ctx context.Context, id string, at time.Time) (bool, error)
}

// ttlPattern is a key lifetime: days, hours or minutes.
var ttlPattern = regexp.MustCompile(`^(?:[1-9][0-9]{0,3}d|[1-9][0-9]{0,4}h|[1-9][0-9]{0,6}m)$`)

// ParseTTL reads a key lifetime: a whole number of days ("30d", at most
// 9999d), hours ("12h") or minutes ("90m").
func ParseTTL(s string) (time.Duration, error) {
	d, err := parseTTL(s)
	if err != nil {
		return 0, errdefs.Invalidf("API key request: %w", err)
	}
	return d, nil
}

func parseTTL(s string) (time.Duration, error) {
	if !ttlPattern.MatchString(s) {
		return 0, fmt.Errorf("expiry %q: want a lifetime in days, hours or minutes, like 30d, 12h or 90m", s)
	}
	n, _ := strconv.Atoi(s[:len(s)-1])
	unit := map[byte]time.Duration{'d': 24 * time.Hour, 'h': time.Hour, 'm': time.Minute}[s[len(s)-1]]
	return time.Duration(n) * unit, nil
}

// namePattern is what a key's name may be.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
