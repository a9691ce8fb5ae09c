package apikeys

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
)

// CacheTTL is how long a verified key is served from memory before it is
// read from the store again. A key revoked through this Service stops
// working at once; one revoked through another control-plane replica
// stops working here within CacheTTL. Expiry is checked on every request.
const CacheTTL = 5 * time.Second

// Service creates, lists and revokes API keys and authenticates requests.
type Service struct {
	store     Store
	log       *slog.Logger
	ownerHash []byte // SHA-256 of the owner credential; nil: none
	now       func() time.Time

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	key     Key
	fetched time.Time
}

// NewService returns a Service over st. ownerToken is the owner
// credential (see LoadOwnerToken); empty means no owner can sign in.
func NewService(st Store, ownerToken string, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{store: st, log: log, now: time.Now, cache: map[string]cached{}}
	if ownerToken != "" {
		s.ownerHash = hash(ownerToken)
	}
	return s
}

// CreateRequest describes a new key.
type CreateRequest struct {
	Project string   `json:"project"`
	Env     string   `json:"env"`
	Name    string   `json:"name,omitempty"`
	Grants  []string `json:"grants"`
	// ExpiresIn is a lifetime for ParseTTL ("30d"); empty: no expiry.
	ExpiresIn string `json:"expiresIn,omitempty"`
	// E2B spells the key as E2B's SDKs expect one (e2b_<hex>, see
	// E2BSpelling); either spelling works anywhere.
	E2B bool `json:"e2b,omitempty"`
}

// Create checks req, stores a new key and returns it with the key itself,
// which exists nowhere else: only its hash is stored.
func (s *Service) Create(ctx context.Context, req CreateRequest) (Key, string, error) {
	var errs []error
	if !deployments.ValidName(req.Project) {
		errs = append(errs, fmt.Errorf("project %q is not a valid name (1-128 letters, digits, '.', '_' or '-')", req.Project))
	}
	if !deployments.ValidName(req.Env) {
		errs = append(errs, fmt.Errorf("env %q is not a valid name (1-128 letters, digits, '.', '_' or '-')", req.Env))
	}
	if req.Name != "" && !namePattern.MatchString(req.Name) {
		errs = append(errs, fmt.Errorf("name %q: want 1-64 letters, digits, '.', '_' or '-'", req.Name))
	}
	grants, err := parseGrants(req.Grants)
	if err != nil {
		errs = append(errs, err)
	}
	var expires *time.Time
	now := s.now().UTC()
	if req.ExpiresIn != "" {
		ttl, err := parseTTL(req.ExpiresIn)
		if err != nil {
			errs = append(errs, err)
		}
		at := now.Add(ttl)
		expires = &at
	}
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return Key{}, "", errdefs.Invalidf("API key request: %s", strings.Join(msgs, "; "))
	}
	id, secret, token := newKey(KindAPI)
	k := Key{ID: id, Kind: KindAPI, Project: req.Project, Env: req.Env, Name: req.Name, Grants: grants,
		SecretHash: hash(secret), CreatedAt: now, ExpiresAt: expires}
	if err := s.store.CreateAPIKey(ctx, k); err != nil {
		return Key{}, "", err
	}
	k, err = s.store.GetAPIKey(ctx, id)
	if err != nil {
		return Key{}, "", err
	}
	s.log.Info("API key created", "key_id", id, "project", k.Project, "env", k.Env, "grants", grants)
	if req.E2B {
		token, _ = E2BSpelling(token)
	}
	return k, token, nil
}

// CreateWorkerRequest describes a new worker credential.
type CreateWorkerRequest struct {
	Name string `json:"name,omitempty"`
	// ExpiresIn is a lifetime for ParseTTL ("30d"); empty: no expiry.
	ExpiresIn string `json:"expiresIn,omitempty"`
}

// CreateWorker stores a new worker credential and returns it with the
// credential itself (only its hash is stored).
func (s *Service) CreateWorker(ctx context.Context, req CreateWorkerRequest) (Key, string, error) {
	var msgs []string
	if req.Name != "" && !namePattern.MatchString(req.Name) {
		msgs = append(msgs, fmt.Sprintf("name %q: want 1-64 letters, digits, '.', '_' or '-'", req.Name))
	}
	now := s.now().UTC()
	var expires *time.Time
	if req.ExpiresIn != "" {
		ttl, err := parseTTL(req.ExpiresIn)
		if err != nil {
			msgs = append(msgs, err.Error())
		}
		at := now.Add(ttl)
		expires = &at
	}
	if len(msgs) > 0 {
		return Key{}, "", errdefs.Invalidf("API key request: %s", strings.Join(msgs, "; "))
	}
	id, secret, token := newKey(KindWorker)
	k := Key{ID: id, Kind: KindWorker, Name: req.Name, Grants: []Grant{}, SecretHash: hash(secret), CreatedAt: now, ExpiresAt: expires}
	if err := s.store.CreateAPIKey(ctx, k); err != nil {
		return Key{}, "", err
	}
	k, err := s.store.GetAPIKey(ctx, id)
	if err != nil {
		return Key{}, "", err
	}
	s.log.Info("worker credential created", "key_id", id)
	return k, token, nil
}

// Get returns a key's metadata, or errdefs.ErrNotFound.
func (s *Service) Get(ctx context.Context, id string) (Key, error) { return s.store.GetAPIKey(ctx, id) }

// List returns every key's metadata, oldest first.
func (s *Service) List(ctx context.Context) ([]Key, error) { return s.store.ListAPIKeys(ctx) }

// Revoke revokes a key; it stops authenticating at once on this replica.
func (s *Service) Revoke(ctx context.Context, id string) (Key, error) {
	k, err := s.store.RevokeAPIKey(ctx, id, s.now())
	s.mu.Lock()
	delete(s.cache, id)
	s.mu.Unlock()
	if err != nil {
		return Key{}, err
	}
	s.log.Info("API key revoked", "key_id", id)
	return k, nil
}

// Authenticate returns the principal a bearer credential stands for, or
// an error wrapping errdefs.ErrUnauthenticated that never repeats the credential.
func (s *Service) Authenticate(ctx context.Context, token string) (Principal, error) {
	th := sha256.Sum256([]byte(token))
	if s.ownerHash != nil && subtle.ConstantTimeCompare(th[:], s.ownerHash) == 1 {
		return Principal{Owner: true}, nil
	}
	kind, id, secret, ok := parseKey(token)
	if !ok {
		return Principal{}, fmt.Errorf("%w: the credential is neither the owner credential nor an API key (hk_...) or worker credential (hw_...)", errdefs.ErrUnauthenticated)
	}
	k, err := s.lookup(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return Principal{}, fmt.Errorf("%w: unknown API key", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return Principal{}, err
	}
	if subtle.ConstantTimeCompare(hash(secret), k.SecretHash) != 1 || k.Kind != kind {
		return Principal{}, fmt.Errorf("%w: unknown API key", errdefs.ErrUnauthenticated)
	}
	return s.keyPrincipal(ctx, k, s.now())
}

// keyPrincipal is the principal of key k at now: an error wrapping
// errdefs.ErrUnauthenticated if it is revoked or expired. It records the
// key's use.
func (s *Service) keyPrincipal(ctx context.Context, k Key, now time.Time) (Principal, error) {
	switch {
	case k.RevokedAt != nil:
		return Principal{}, fmt.Errorf("%w: API key %s was revoked", errdefs.ErrUnauthenticated, k.ID)
	case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
		return Principal{}, fmt.Errorf("%w: API key %s expired at %s", errdefs.ErrUnauthenticated, k.ID, k.ExpiresAt.Format(time.RFC3339))
	}
	if k.LastUsedAt == nil || now.Sub(*k.LastUsedAt) >= TouchInterval {
		s.touch(ctx, k.ID, now)
	}
	if k.Kind == KindWorker {
		return Principal{Worker: true, KeyID: k.ID}, nil
	}
	return Principal{KeyID: k.ID, Project: k.Project, Env: k.Env, Grants: k.Grants}, nil
}

// lookup reads a key through the cache.
func (s *Service) lookup(ctx context.Context, id string) (Key, error) {
	now := s.now()
	s.mu.Lock()
	c, ok := s.cache[id]
	s.mu.Unlock()
	if ok && now.Sub(c.fetched) < CacheTTL {
		return c.key, nil
	}
	k, err := s.store.GetAPIKey(ctx, id)
	if err != nil {
		return Key{}, err
	}
	s.mu.Lock()
	s.cache[id] = cached{key: k, fetched: now}
	s.mu.Unlock()
	return k, nil
}

// touch records that a key was used, at most once per TouchInterval. A
// failure is logged: it does not fail the request.
func (s *Service) touch(ctx context.Context, id string, now time.Time) {
	s.mu.Lock()
	if c, ok := s.cache[id]; ok {
		t := now
		c.key.LastUsedAt = &t
		s.cache[id] = c
	}
	s.mu.Unlock()
	if _, err := s.store.TouchAPIKey(ctx, id, now); err != nil {
		s.log.Warn("record API key use", "key_id", id, "err", err)
	}
}
