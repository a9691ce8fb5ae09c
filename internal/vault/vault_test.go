package vault_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/vault/vaulttest"
)

// memStore is an in-memory vault.Store for the vault's unit tests.
type memStore struct {
	mu      sync.Mutex
	keys    []vault.DataKey
	secrets map[string]vault.Secret
}

func (m *memStore) DataKeys(context.Context) ([]vault.DataKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.keys), nil
}

func (m *memStore) AddDataKey(_ context.Context, wrapped []byte) (vault.DataKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := vault.DataKey{Version: len(m.keys) + 1, Wrapped: slices.Clone(wrapped), CreatedAt: time.Now()}
	m.keys = append(m.keys, k)
	return k, nil
}

func (m *memStore) RewrapDataKeys(_ context.Context, keys []vault.DataKey) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.keys = slices.Clone(keys)
	return nil
}

func id(p, e, n string) string { return p + "\x00" + e + "\x00" + n }

func (m *memStore) PutSecret(_ context.Context, s vault.Secret) (vault.Secret, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.secrets == nil {
		m.secrets = map[string]vault.Secret{}
	}
	now := time.Now()
	if old, ok := m.secrets[id(s.Project, s.Env, s.Name)]; ok {
		s.CreatedAt = old.CreatedAt
		if s.KeepEgress {
			s.Egress = old.Egress
		}
	} else {
		s.CreatedAt = now
	}
	s.UpdatedAt, s.KeepEgress = now, false
	m.secrets[id(s.Project, s.Env, s.Name)] = s
	return s, nil
}

func (m *memStore) GetSecret(_ context.Context, p, e, n string) (vault.Secret, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.secrets[id(p, e, n)]
	if !ok {
		return s, errdefs.ErrNotFound
	}
	return s, nil
}

func (m *memStore) ListSecrets(_ context.Context, p, e string) ([]vault.Secret, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []vault.Secret
	for _, s := range m.secrets {
		if s.Project == p && s.Env == e {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b vault.Secret) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (m *memStore) DeleteSecret(_ context.Context, p, e, n string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.secrets[id(p, e, n)]; !ok {
		return errdefs.ErrNotFound
	}
	delete(m.secrets, id(p, e, n))
	return nil
}

func TestVault(t *testing.T) {
	vaulttest.Run(t, func(*testing.T) vault.Store { return &memStore{} }, func(_ *testing.T, s vault.Store) []byte {
		m := s.(*memStore)
		var all bytes.Buffer
		for _, k := range m.keys {
			all.Write(k.Wrapped)
		}
		for _, sec := range m.secrets {
			all.Write(sec.Ciphertext)
		}
		return all.Bytes()
	})
}

func TestLoadMasterKey(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	if k, err := vault.LoadMasterKey(good, ""); err != nil || len(k) != 32 {
		t.Errorf("LoadMasterKey(value) = %d bytes, %v", len(k), err)
	}
	f := filepath.Join(t.TempDir(), "key")
	os.WriteFile(f, []byte(good+"\n"), 0o600)
	if k, err := vault.LoadMasterKey("", f); err != nil || len(k) != 32 {
		t.Errorf("LoadMasterKey(file) = %d bytes, %v", len(k), err)
	}
	for _, bad := range []string{"", "not base64!", base64.StdEncoding.EncodeToString([]byte("short"))} {
		if _, err := vault.LoadMasterKey(bad, ""); err == nil {
			t.Errorf("LoadMasterKey(%q) accepted", bad)
		}
	}
}

func TestEgressCovers(t *testing.T) {
	e := vault.Egress{Hosts: []string{"*.github.com", "api.example.com"}}
	for p, want := range map[string]bool{
		"api.github.com": true, "*.api.github.com": true, "*.github.com": true,
		"github.com": false, "api.example.com": true, "*.example.com": false, "example.com": false,
	} {
		if got := e.Covers(p); got != want {
			t.Errorf("Covers(%q) = %v, want %v", p, got, want)
		}
	}
	for v, want := range map[string]bool{"tok": true, "tok\n": true, "tok\r\n": true, "a\tb": false, "a\nb": false, "\n": false, "a\x00": false} {
		if _, _, ok := vault.SplitLine([]byte(v)); ok != want {
			t.Errorf("SplitLine(%q) ok = %v, want %v", v, ok, want)
		}
	}
}
