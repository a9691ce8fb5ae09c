package worker

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/vault"
	"github.com/helmr/helmr/internal/workspaces"
)

func TestTrustFiles(t *testing.T) {
	ca, err := network.NewCA("t")
	if err != nil {
		t.Fatal(err)
	}
	layer := t.TempDir()
	bundle := filepath.Join(layer, "etc/ssl/certs/ca-certificates.crt")
	if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundle, []byte("SYSTEM ROOTS"), 0o644); err != nil { // no final newline
		t.Fatal(err)
	}
	ts, err := trustFiles(images.Image{Layers: []string{layer}}, nil, ca.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	want := "SYSTEM ROOTS\n" + string(ca.CertPEM())
	if len(ts.bundles) != 1 || ts.bundles[0].Path != "/etc/ssl/certs/ca-certificates.crt" || string(ts.bundles[0].Data) != want || ts.bundles[0].Mode != 0o644 {
		t.Errorf("bundles = %+v, want the image's bundle with the CA after it", ts.bundles)
	}
	if string(ts.host["bundle.crt"]) != want || string(ts.host["ca.crt"]) != string(ca.CertPEM()) {
		t.Errorf("host files = %q", ts.host)
	}
	for _, e := range []string{"SSL_CERT_FILE=/opt/helmr/ca/bundle.crt", "GIT_SSL_CAINFO=/opt/helmr/ca/bundle.crt", "REQUESTS_CA_BUNDLE=/opt/helmr/ca/bundle.crt", "NODE_EXTRA_CA_CERTS=/opt/helmr/ca/ca.crt"} {
		if !slices.Contains(ts.env, e) {
			t.Errorf("env %v lacks %s", ts.env, e)
		}
	}
	// Without a system bundle only Node's extra certificates are set: a
	// bundle of the CA alone would make other tools distrust public hosts.
	bare, err := trustFiles(images.Image{Layers: []string{t.TempDir()}}, nil, ca.CertPEM())
	if err != nil {
		t.Fatal(err)
	}
	if len(bare.bundles) != 0 || !slices.Equal(bare.env, []string{"NODE_EXTRA_CA_CERTS=/opt/helmr/ca/ca.crt"}) {
		t.Errorf("no system bundle: bundles %v env %v", bare.bundles, bare.env)
	}
}

func TestHeldSecrets(t *testing.T) {
	rule := &vault.Egress{Hosts: []string{"api.example.test"}}
	op := workspaces.Op{Secrets: map[string]string{"A": "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n", "B": "plain-value"}, Egress: map[string]*vault.Egress{"A": rule}}
	held, creds, err := heldSecrets(op, nil)
	if err != nil {
		t.Fatal(err)
	}
	if held["B"] != "plain-value" || len(creds) != 1 || creds[0].Name != "A" || held["A"] != creds[0].Placeholder ||
		creds[0].Value != "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" || !strings.HasPrefix(held["A"], "ghp_") || strings.Contains(held["A"], "\n") {
		t.Errorf("held %q, creds %+v: want B's value, and for A a placeholder (no newline) bound to A's line", held, creds)
	}
	// A session reuses its placeholder: no new credential.
	again, fresh, err := heldSecrets(op, map[string]network.Credential{"A": creds[0]})
	if err != nil || again["A"] != held["A"] || len(fresh) != 0 {
		t.Errorf("reuse: held %q fresh %v err %v", again, fresh, err)
	}
	// A new exec gets a new placeholder.
	other, _, _ := heldSecrets(op, nil)
	if other["A"] == held["A"] {
		t.Errorf("two operations got the same placeholder %q", held["A"])
	}
	bad := workspaces.Op{Secrets: map[string]string{"K": "-----BEGIN KEY-----\nabc\n-----END KEY-----\n"}, Egress: map[string]*vault.Egress{"K": rule}}
	if _, _, err := heldSecrets(bad, nil); err == nil || !strings.Contains(err.Error(), "not one line") {
		t.Errorf("a multi-line egress value: %v, want refused", err)
	}
}
