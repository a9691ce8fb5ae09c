// Package vaulttest is the suite every vault.Store implementation passes
// (SQLite, PostgreSQL), and the vault's own behaviour on it.
package vaulttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/vault"
)

func key(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// Run runs the suite; open returns a fresh, empty store. dump, if not nil,
// returns every byte the store holds (a database file or dump), which must
// never contain a plaintext value.
func Run(t *testing.T, open func(t *testing.T) vault.Store, dump func(t *testing.T, s vault.Store) []byte) {
	ctx := context.Background()
	t.Run("SetRevealListDelete", func(t *testing.T) {
		s := open(t)
		v, err := vault.Open(ctx, s, key(t))
		if err != nil {
			t.Fatal(err)
		}
		secret := []byte("hunter2-" + t.Name())
		m, err := v.Set(ctx, "p", "prod", "API_TOKEN", secret)
		if err != nil || m.Name != "API_TOKEN" || m.Env != "prod" || m.CreatedAt.IsZero() {
			t.Fatalf("Set = %+v, %v", m, err)
		}
		if _, err := v.Set(ctx, "p", "dev", "API_TOKEN", []byte("dev value")); err != nil {
			t.Fatal(err)
		}
		got, err := v.Reveal(ctx, "p", "prod", "API_TOKEN")
		if err != nil || !bytes.Equal(got, secret) {
			t.Fatalf("Reveal = %q, %v", got, err)
		}
		// Replacing keeps one secret with the new value.
		if _, err := v.Set(ctx, "p", "prod", "API_TOKEN", []byte("rotated")); err != nil {
			t.Fatal(err)
		}
		if got, _ := v.Reveal(ctx, "p", "prod", "API_TOKEN"); string(got) != "rotated" {
			t.Errorf("after replacing: %q", got)
		}
		list, err := v.List(ctx, "p", "prod")
		if err != nil || len(list) != 1 || list[0].Name != "API_TOKEN" || !list[0].UpdatedAt.After(list[0].CreatedAt.Add(-1)) {
			t.Errorf("List = %+v, %v", list, err)
		}
		if _, err := v.Reveal(ctx, "p", "prod", "NOPE"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Reveal(missing) = %v, want errdefs.ErrNotFound", err)
		}
		if err := v.Delete(ctx, "p", "prod", "API_TOKEN"); err != nil {
			t.Fatal(err)
		}
		if err := v.Delete(ctx, "p", "prod", "API_TOKEN"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("second Delete = %v, want errdefs.ErrNotFound", err)
		}
		if got, err := v.Reveal(ctx, "p", "dev", "API_TOKEN"); err != nil || string(got) != "dev value" {
			t.Errorf("the other environment's secret = %q, %v", got, err)
		}
		if dump != nil {
			all := dump(t, s)
			for _, plain := range [][]byte{secret, []byte("rotated"), []byte("dev value")} {
				if bytes.Contains(all, plain) {
					t.Errorf("the store holds the plaintext %q", plain)
				}
			}
		}
	})
	t.Run("BadInput", func(t *testing.T) {
		v, err := vault.Open(ctx, open(t), key(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"", "a/b", "../x", "1ABC", "has space", "dot.ted", string(make([]byte, 200))} {
			if _, err := v.Set(ctx, "p", "dev", name, []byte("x")); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Set(name %q) = %v, want errdefs.ErrInvalid", name, err)
			}
		}
		for _, val := range [][]byte{nil, make([]byte, vault.MaxValueBytes+1)} {
			if _, err := v.Set(ctx, "p", "dev", "OK", val); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("Set(%d bytes) = %v, want errdefs.ErrInvalid", len(val), err)
			}
		}
		if list, _ := v.List(ctx, "p", "dev"); len(list) != 0 {
			t.Errorf("refused secrets were stored: %+v", list)
		}
	})
	t.Run("MasterKey", func(t *testing.T) {
		s := open(t)
		old := key(t)
		v, err := vault.Open(ctx, s, old)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Set(ctx, "p", "dev", "A", []byte("before")); err != nil {
			t.Fatal(err)
		}
		if _, err := vault.Open(ctx, s, key(t)); !errors.Is(err, vault.ErrMasterKey) {
			t.Errorf("Open with another master key = %v, want ErrMasterKey", err)
		}
		next := key(t)
		if err := v.RotateMasterKey(ctx, next); err != nil {
			t.Fatal(err)
		}
		// The running vault goes on; a new process needs the new key.
		if got, err := v.Reveal(ctx, "p", "dev", "A"); err != nil || string(got) != "before" {
			t.Errorf("after rotation, the open vault reveals %q, %v", got, err)
		}
		if _, err := vault.Open(ctx, s, old); !errors.Is(err, vault.ErrMasterKey) {
			t.Errorf("Open with the old master key after rotation = %v, want ErrMasterKey", err)
		}
		reopened, err := vault.Open(ctx, s, next)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := reopened.Reveal(ctx, "p", "dev", "A"); err != nil || string(got) != "before" {
			t.Errorf("reopened with the new key: %q, %v", got, err)
		}
		// A new data key seals new values; old ones still open.
		if err := reopened.RotateDataKey(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := reopened.Set(ctx, "p", "dev", "B", []byte("after")); err != nil {
			t.Fatal(err)
		}
		for n, want := range map[string]string{"A": "before", "B": "after"} {
			if got, err := v.Reveal(ctx, "p", "dev", n); err != nil || string(got) != want {
				t.Errorf("Reveal(%s) from the first vault = %q, %v; want %q (it loads the new data key)", n, got, err, want)
			}
		}
	})
	t.Run("MovedCiphertext", func(t *testing.T) {
		s := open(t)
		v, err := vault.Open(ctx, s, key(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Set(ctx, "p", "prod", "PROD_KEY", []byte("prod only")); err != nil {
			t.Fatal(err)
		}
		sealed, err := s.GetSecret(ctx, "p", "prod", "PROD_KEY")
		if err != nil {
			t.Fatal(err)
		}
		// Copied under another environment, the row must not open.
		sealed.Env = "dev"
		if _, err := s.PutSecret(ctx, sealed); err != nil {
			t.Fatal(err)
		}
		if got, err := v.Reveal(ctx, "p", "dev", "PROD_KEY"); err == nil {
			t.Errorf("a ciphertext moved to another environment opened: %q", got)
		}
	})
	t.Run("EgressRule", func(t *testing.T) {
		s := open(t)
		v, err := vault.Open(ctx, s, key(t))
		if err != nil {
			t.Fatal(err)
		}
		m, err := v.SetWithEgress(ctx, "p", "dev", "GH", []byte("ghp_value\n"), &vault.Egress{Hosts: []string{"GitHub.com", "*.github.com", "github.com"}})
		if err != nil {
			t.Fatal(err)
		}
		if m.Mode != vault.ModeEgress || m.Egress == nil || strings.Join(m.Egress.Hosts, ",") != "*.github.com,github.com" {
			t.Errorf("meta = %+v, want egress mode with the hosts normalized", m)
		}
		// Setting the value again keeps the rule; nothing weakens it
		// but an explicit change.
		if m, err = v.Set(ctx, "p", "dev", "GH", []byte("ghp_rotated")); err != nil || m.Mode != vault.ModeEgress {
			t.Errorf("Set over an egress secret = %+v, %v, want the rule kept", m, err)
		}
		val, err := v.Open(ctx, "p", "dev", "GH")
		if err != nil || string(val.Bytes) != "ghp_rotated" || val.Egress == nil || !val.Egress.Matches("api.github.com") || val.Egress.Matches("evil.com") {
			t.Errorf("Open = %q %+v %v", val.Bytes, val.Egress, err)
		}
		ms, err := v.List(ctx, "p", "dev")
		if err != nil || len(ms) != 1 || ms[0].Mode != vault.ModeEgress {
			t.Errorf("List = %+v, %v", ms, err)
		}
		if m, err = v.SetWithEgress(ctx, "p", "dev", "GH", []byte("ghp_rotated"), nil); err != nil || m.Mode != vault.ModeSandbox || m.Egress != nil {
			t.Errorf("SetWithEgress(nil) = %+v, %v, want sandbox mode", m, err)
		}
		for _, bad := range []struct {
			value string
			hosts []string
		}{
			{"v", nil},
			{"v", []string{"*"}},
			{"v", []string{"10.0.0.1"}},
			{"v", []string{"host:443"}},
			{"v", []string{"*.com"}},
			{"two\nlines", []string{"example.com"}},
		} {
			if _, err := v.SetWithEgress(ctx, "p", "dev", "BAD", []byte(bad.value), &vault.Egress{Hosts: bad.hosts}); !errors.Is(err, errdefs.ErrInvalid) {
				t.Errorf("SetWithEgress(%q, %v) = %v, want invalid", bad.value, bad.hosts, err)
			}
		}
		if _, err := v.Open(ctx, "p", "dev", "BAD"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("a refused secret was stored: %v", err)
		}
	})
}
