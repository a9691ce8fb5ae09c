package worker

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
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

// TestSecretsForEgress: an egress-bound env, file and directory secret
// reach the sandbox as placeholders (the file with the value's newline,
// each directory file its own credential), an in-sandbox one as its
// value, and a restored run takes back the placeholders it was given.
func TestSecretsForEgress(t *testing.T) {
	rule := &vault.Egress{Hosts: []string{"api.example.test"}}
	fc := &fakeControl{
		secrets: map[string][]byte{"TOKEN": []byte("ghp_0123456789abcdefghijABCDEFGHIJ012345"), "FILE": []byte("tok-0123456789abcdefXYZ\n"),
			"DIR": []byte(`{"a":"sk-aaaaaaaaaaaaaaaaaaaa","b":"sk-bbbbbbbbbbbbbbbbbbbb"}`), "KEY": []byte("in sandbox\nkey")},
		egress: map[string]*vault.Egress{"TOKEN": rule, "FILE": rule, "DIR": rule},
	}
	w := &Worker{cfg: Config{Control: fc}}
	l := Lease{Run: runs.Run{ID: "run_1"}, Task: deployments.TaskManifest{Secrets: map[string]deployments.SecretTarget{
		"TOKEN": {Env: "TOKEN"}, "FILE": {File: "/run/secrets/file"}, "DIR": {Directory: "/run/dir", Files: []string{"a", "b"}},
		"KEY": {File: "/run/secrets/key"},
	}}}
	rs, err := w.secretsFor(t.Context(), l, prepared{spec: sandbox.Spec{UID: 1000, GID: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	creds := map[string]network.Credential{}
	for _, c := range rs.creds {
		creds[c.Name] = c
	}
	if len(creds) != 4 || rs.env["TOKEN"] != creds["TOKEN"].Placeholder || creds["TOKEN"].Value != string(fc.secrets["TOKEN"]) {
		t.Fatalf("creds %+v env %v: want TOKEN, FILE, DIR/a, DIR/b bound and the env holding TOKEN's placeholder", rs.creds, rs.env)
	}
	files := map[string]string{}
	for _, f := range rs.files {
		files[f.file.Path] = string(f.file.Data)
	}
	if files["/run/secrets/file"] != creds["FILE"].Placeholder+"\n" || creds["FILE"].Value != "tok-0123456789abcdefXYZ" ||
		files["/run/dir/a"] != creds["DIR/a"].Placeholder || files["/run/dir/b"] != creds["DIR/b"].Placeholder ||
		files["/run/secrets/key"] != "in sandbox\nkey" {
		t.Errorf("placed files %q, creds %+v", files, creds)
	}
	if !slices.Equal(rs.inSandbox, []string{"KEY"}) || len(rs.egress) != 3 {
		t.Errorf("modes: in sandbox %v, egress %v", rs.inSandbox, rs.egress)
	}
	saved := rs.placeholders()
	again, err := w.secretsFor(t.Context(), l, prepared{spec: sandbox.Spec{UID: 1000, GID: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	if err := again.keep(saved); err != nil {
		t.Fatal(err)
	}
	for _, c := range again.creds {
		if c.Placeholder != saved[c.Name] {
			t.Errorf("restored %s has placeholder %q, want the saved %q", c.Name, c.Placeholder, saved[c.Name])
		}
	}
	if err := again.keep(map[string]string{}); err == nil {
		t.Error("keep without the saved placeholders: want an error")
	}
}
