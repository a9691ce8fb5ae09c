// Package vault keeps secret values encrypted at rest. Each value is
// sealed with AES-256-GCM under a data key, with the secret's project,
// environment and name as additional data (a ciphertext moved to another
// row does not open). Data keys are stored only wrapped (AES-256-GCM) by
// the operator's master key, which never touches the store: rotating the
// master key re-wraps the data keys and re-encrypts no value, and a
// running control plane, which holds the unwrapped data keys, keeps
// working through it.
//
// Nothing in this package returns a value except Reveal, which the worker
// path uses to materialize a run's bound secrets; the API lists metadata
// only.
package vault

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// Errors callers branch on.
var (
	// ErrMasterKey: the master key does not open the stored data keys.
	ErrMasterKey = errors.New("the master key does not open the vault's data keys")
)

// MaxValueBytes bounds one secret value.
const MaxValueBytes = 64 << 10

// namePattern: what an environment variable may be called, so that every
// secret can be bound as one; no path characters.
var namePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// ValidName reports whether n may name a secret.
func ValidName(n string) bool { return namePattern.MatchString(n) }

// DataKey is a data key as stored: wrapped by the master key.
type DataKey struct {
	Version   int
	Wrapped   []byte // nonce || AES-256-GCM(master, key)
	CreatedAt time.Time
}

// Secret is a secret as stored.
type Secret struct {
	Project, Env, Name string
	KeyVersion         int
	Ciphertext         []byte // nonce || AES-256-GCM(data key, value)
	// Egress, if set, binds the secret for egress injection (see Egress);
	// nil: it is placed inside the sandboxes that bind it.
	Egress *Egress
	// KeepEgress, on PutSecret, leaves the stored rule of an existing
	// secret as it is (a new one gets Egress).
	KeepEgress bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Modes of a secret: how its value reaches what a sandbox runs.
const (
	// ModeEgress: the value never enters a sandbox. Inside, a placeholder
	// stands for it; the worker's network stack puts the value into
	// requests to the secret's hosts, outside the sandbox.
	ModeEgress = "egress"
	// ModeSandbox: the value itself is placed in the sandbox (an env var,
	// a file), where any command the sandbox runs can read it; output
	// redaction hides it from callers, which stops mistakes, not a
	// command that wants it. For tools that cannot work through a proxy
	// (SSH and signing keys).
	ModeSandbox = "sandbox"
)

// Meta is what may be shown of a secret: never its value.
type Meta struct {
	Project string `json:"project"`
	Env     string `json:"env"`
	Name    string `json:"name"`
	// Mode is ModeEgress or ModeSandbox.
	Mode      string    `json:"mode"`
	Egress    *Egress   `json:"egress,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Store keeps data keys and sealed secrets.
type Store interface {
	// DataKeys returns every data key, oldest first.
	DataKeys(ctx context.Context) ([]DataKey, error)
	// AddDataKey stores a data key under the next version and returns it.
	AddDataKey(ctx context.Context, wrapped []byte) (DataKey, error)
	// RewrapDataKeys replaces the wrapped form of every data key at once
	// (master key rotation); versions must match the stored ones.
	RewrapDataKeys(ctx context.Context, keys []DataKey) error
	// PutSecret inserts or replaces a secret (by project, env, name).
	PutSecret(ctx context.Context, s Secret) (Secret, error)
	// GetSecret returns a secret, or errdefs.ErrNotFound.
	GetSecret(ctx context.Context, project, env, name string) (Secret, error)
	// ListSecrets returns a project environment's secrets by name.
	ListSecrets(ctx context.Context, project, env string) ([]Secret, error)
	// DeleteSecret removes a secret, or returns errdefs.ErrNotFound.
	DeleteSecret(ctx context.Context, project, env, name string) error
}

// Vault seals and opens secrets with the data keys of a store.
type Vault struct {
	store  Store
	master cipher.AEAD

	mu   sync.Mutex
	keys map[int]cipher.AEAD // unwrapped data keys by version
	cur  int                 // the version new values are sealed with
}

// Open returns a vault over store with the 32-byte master key, checking
// that the key opens every stored data key (a wrong key is ErrMasterKey,
// before any secret is touched). A store without data keys gets one.
func Open(ctx context.Context, store Store, master []byte) (*Vault, error) {
	m, err := aead(master)
	if err != nil {
		return nil, fmt.Errorf("master key: %w", err)
	}
	v := &Vault{store: store, master: m, keys: map[int]cipher.AEAD{}}
	if err := v.load(ctx); err != nil {
		return nil, err
	}
	if v.cur == 0 {
		if err := v.RotateDataKey(ctx); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (v *Vault) load(ctx context.Context) error {
	keys, err := v.store.DataKeys(ctx)
	if err != nil {
		return fmt.Errorf("vault: %w", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, k := range keys {
		raw, err := open(v.master, k.Wrapped, keyAAD(k.Version))
		if err != nil {
			return fmt.Errorf("%w (data key %d)", ErrMasterKey, k.Version)
		}
		a, err := aead(raw)
		if err != nil {
			return fmt.Errorf("vault: data key %d: %w", k.Version, err)
		}
		v.keys[k.Version] = a
		v.cur = max(v.cur, k.Version)
	}
	return nil
}

// RotateDataKey makes a new data key the one new values are sealed with;
// existing values stay readable under their own.
func (v *Vault) RotateDataKey(ctx context.Context) error {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	keys, err := v.store.DataKeys(ctx)
	if err != nil {
		return fmt.Errorf("vault: %w", err)
	}
	next := 1
	if len(keys) > 0 {
		next = keys[len(keys)-1].Version + 1
	}
	wrapped, err := seal(v.master, raw, keyAAD(next))
	if err != nil {
		return err
	}
	k, err := v.store.AddDataKey(ctx, wrapped)
	if err != nil {
		return fmt.Errorf("vault: add data key: %w", err)
	}
	if k.Version != next {
		return fmt.Errorf("vault: data key stored as version %d, sealed for %d (a concurrent rotation?)", k.Version, next)
	}
	a, err := aead(raw)
	if err != nil {
		return err
	}
	v.mu.Lock()
	v.keys[k.Version], v.cur = a, k.Version
	v.mu.Unlock()
	return nil
}

// RotateMasterKey re-wraps every data key under newMaster, in one store
// transaction. Values are not re-encrypted. This vault keeps working (it
// holds the data keys); processes opened with the old key keep working
// until they restart, and must then be given the new one.
func (v *Vault) RotateMasterKey(ctx context.Context, newMaster []byte) error {
	nm, err := aead(newMaster)
	if err != nil {
		return fmt.Errorf("new master key: %w", err)
	}
	keys, err := v.store.DataKeys(ctx)
	if err != nil {
		return fmt.Errorf("vault: %w", err)
	}
	out := make([]DataKey, 0, len(keys))
	for _, k := range keys {
		raw, err := open(v.master, k.Wrapped, keyAAD(k.Version))
		if err != nil {
			return fmt.Errorf("%w (data key %d)", ErrMasterKey, k.Version)
		}
		w, err := seal(nm, raw, keyAAD(k.Version))
		if err != nil {
			return err
		}
		out = append(out, DataKey{Version: k.Version, Wrapped: w, CreatedAt: k.CreatedAt})
	}
	if err := v.store.RewrapDataKeys(ctx, out); err != nil {
		return fmt.Errorf("vault: re-wrap data keys: %w", err)
	}
	v.mu.Lock()
	v.master = nm
	v.mu.Unlock()
	return nil
}

// Set seals value as project/env/name, replacing an earlier value and
// keeping its egress rule (a new secret has none: ModeSandbox).
func (v *Vault) Set(ctx context.Context, project, env, name string, value []byte) (Meta, error) {
	return v.put(ctx, Secret{Project: project, Env: env, Name: name, KeepEgress: true}, value)
}

// SetWithEgress seals value as project/env/name with the egress rule e
// (nil: ModeSandbox), replacing an earlier value and rule at once.
func (v *Vault) SetWithEgress(ctx context.Context, project, env, name string, value []byte, e *Egress) (Meta, error) {
	if e != nil {
		n, err := e.Normalize()
		if err != nil {
			return Meta{}, errdefs.Invalidf("secret %s: %v", name, err)
		}
		if _, _, ok := SplitLine(value); !ok {
			return Meta{}, errdefs.Invalidf("secret %s: a value bound for egress goes into request headers, so it is one line (a trailing newline is allowed); keep multi-line values (keys) in the sandbox: set it without --hosts", name)
		}
		e = &n
	}
	return v.put(ctx, Secret{Project: project, Env: env, Name: name, Egress: e}, value)
}

func (v *Vault) put(ctx context.Context, sec Secret, value []byte) (Meta, error) {
	project, env, name := sec.Project, sec.Env, sec.Name
	if !ValidName(name) {
		return Meta{}, errdefs.Invalidf("secret name %q: letters, digits and '_', not starting with a digit, at most 128", name)
	}
	if len(value) == 0 || len(value) > MaxValueBytes {
		return Meta{}, errdefs.Invalidf("secret %s: a value is 1 to %d bytes, got %d", name, MaxValueBytes, len(value))
	}
	v.mu.Lock()
	ver, a := v.cur, v.keys[v.cur]
	v.mu.Unlock()
	ct, err := seal(a, value, secretAAD(project, env, name))
	if err != nil {
		return Meta{}, err
	}
	sec.KeyVersion, sec.Ciphertext = ver, ct
	s, err := v.store.PutSecret(ctx, sec)
	if err != nil {
		return Meta{}, fmt.Errorf("vault: store %s: %w", name, err)
	}
	return meta(s), nil
}

// Reveal opens a secret's value. Only the path that materializes a run's
// bound secrets calls it.
func (v *Vault) Reveal(ctx context.Context, project, env, name string) ([]byte, error) {
	val, err := v.Open(ctx, project, env, name)
	return val.Bytes, err
}

// Value is a secret's value with the rule that says where it may go.
type Value struct {
	Bytes  []byte
	Egress *Egress // nil: ModeSandbox
}

// Open opens a secret's value and returns it with its egress rule. Only
// the paths that hand a run's or an operation's secrets to a worker call
// it.
func (v *Vault) Open(ctx context.Context, project, env, name string) (Value, error) {
	s, err := v.store.GetSecret(ctx, project, env, name)
	if err != nil {
		return Value{}, err
	}
	val, err := v.open(ctx, s)
	return Value{Bytes: val, Egress: s.Egress}, err
}

func (v *Vault) open(ctx context.Context, s Secret) ([]byte, error) {
	name := s.Name
	v.mu.Lock()
	a, ok := v.keys[s.KeyVersion]
	v.mu.Unlock()
	if !ok {
		if err := v.load(ctx); err != nil { // a key another process added
			return nil, err
		}
		v.mu.Lock()
		a, ok = v.keys[s.KeyVersion]
		v.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("vault: %s is sealed with data key %d, which the store lacks", name, s.KeyVersion)
		}
	}
	val, err := open(a, s.Ciphertext, secretAAD(s.Project, s.Env, name))
	if err != nil {
		return nil, fmt.Errorf("vault: %s does not open: its ciphertext was altered or moved", name)
	}
	return val, nil
}

// List returns the metadata of a project environment's secrets.
func (v *Vault) List(ctx context.Context, project, env string) ([]Meta, error) {
	ss, err := v.store.ListSecrets(ctx, project, env)
	if err != nil {
		return nil, err
	}
	out := make([]Meta, 0, len(ss))
	for _, s := range ss {
		out = append(out, meta(s))
	}
	return out, nil
}

// Delete removes a secret.
func (v *Vault) Delete(ctx context.Context, project, env, name string) error {
	return v.store.DeleteSecret(ctx, project, env, name)
}

func meta(s Secret) Meta {
	m := Meta{Project: s.Project, Env: s.Env, Name: s.Name, Mode: ModeSandbox, Egress: s.Egress, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt}
	if s.Egress != nil {
		m.Mode = ModeEgress
	}
	return m
}

func keyAAD(version int) []byte { return []byte(fmt.Sprintf("helmr data key %d", version)) }

func secretAAD(project, env, name string) []byte {
	return []byte("helmr secret\x00" + project + "\x00" + env + "\x00" + name)
}

func aead(key []byte) (cipher.AEAD, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("want 32 bytes (AES-256), got %d", len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func seal(a cipher.AEAD, plain, aad []byte) ([]byte, error) {
	nonce := make([]byte, a.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return a.Seal(nonce, nonce, plain, aad), nil
}

func open(a cipher.AEAD, sealed, aad []byte) ([]byte, error) {
	if len(sealed) < a.NonceSize() {
		return nil, errors.New("short ciphertext")
	}
	return a.Open(nil, sealed[:a.NonceSize()], sealed[a.NonceSize():], aad)
}

// LoadMasterKey reads the operator's master key: base64 of 32 bytes, from
// the value of HELMR_MASTER_KEY or the file HELMR_MASTER_KEY_FILE names.
func LoadMasterKey(value, file string) ([]byte, error) {
	src := "HELMR_MASTER_KEY"
	if value == "" && file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("master key file: %w", err)
		}
		value, src = string(b), file
	}
	if value == "" {
		return nil, errors.New("no master key: set HELMR_MASTER_KEY (base64 of 32 random bytes, e.g. `head -c32 /dev/urandom | base64`) or HELMR_MASTER_KEY_FILE")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("%s: want base64 of exactly 32 bytes", src)
	}
	return key, nil
}
