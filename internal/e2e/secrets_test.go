package e2e

import (
	"context"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSecretsVault drives the vault through the CLI and the API on helmr
// dev: values go in through stdin only, nothing shows them again (CLI,
// API, database file), bad names are refused, and the master key rotates
// while the control plane runs.
func TestSecretsVault(t *testing.T) {
	d := startDev(t, "process")
	const value = "s3cr3t-vault-value-e2e"
	set := func(name, stdin string, extra ...string) (string, string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(d.bin, "helmr"), append([]string{"secret", "set", name, "--project", "vaulted"}, extra...)...)
		cmd.Env, cmd.Stdin = d.env, strings.NewReader(stdin)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return out.String(), errb.String(), code
	}
	if out, errOut, code := set("API_TOKEN", value); code != 0 || !strings.Contains(out, "secret API_TOKEN set in vaulted/dev") || strings.Contains(out+errOut, value) {
		t.Fatalf("secret set = %d %q %q", code, out, errOut)
	}
	for _, c := range []struct{ name, stdin, want string }{
		{"BAD/NAME", "x", "letters, digits and '_'"},
		{"EMPTY", "", "1 to 65536 bytes"},
	} {
		if _, errOut, code := set(c.name, c.stdin); code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("secret set %s = %d %q, want an error containing %q", c.name, code, errOut, c.want)
		}
	}
	if _, errOut, code := set("ARGV", "", value); code == 0 || !strings.Contains(errOut, "never from the command line") {
		t.Errorf("secret set NAME VALUE = %d %q, want a refusal", code, errOut)
	}
	list := d.mustHelmr("secret", "list", "--project", "vaulted")
	if !strings.Contains(list, "API_TOKEN") || strings.Contains(list, value) || strings.Contains(list, "ARGV") {
		t.Errorf("secret list = %q", list)
	}
	// The API's answers hold names, never the value.
	for _, u := range []string{"/v1/secrets?project=vaulted", "/v1/secrets?project=vaulted&env=dev"} {
		status, body := d.get(u)
		if status != 200 || !strings.Contains(string(body), `"API_TOKEN"`) || strings.Contains(string(body), value) {
			t.Errorf("GET %s = %d %s", u, status, body)
		}
	}
	// Nor does the database: the value is sealed, the data key wrapped.
	for _, f := range []string{"helmr.db", "helmr.db-wal"} {
		data, _ := os.ReadFile(filepath.Join(d.dataDir, f))
		if strings.Contains(string(data), value) || strings.Contains(string(data), base64.StdEncoding.EncodeToString([]byte(value))) {
			t.Errorf("%s holds the plaintext", f)
		}
	}
	keyFile := filepath.Join(d.dataDir, "master.key")
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("development master key %s: %v, %v; want mode 0600", keyFile, fi, err)
	}
	before, _ := os.ReadFile(keyFile)

	// Rotating the master key while helmr dev runs: it goes on serving.
	newKey := filepath.Join(t.TempDir(), "new.key")
	os.WriteFile(newKey, []byte(base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))), 0o600)
	if out := d.mustHelmr("secret", "rotate-key", "--new-key-file", newKey, "--data-dir", d.dataDir); !strings.Contains(out, "re-wrapped") {
		t.Errorf("rotate-key = %q", out)
	}
	if after, _ := os.ReadFile(keyFile); string(after) == string(before) {
		t.Error("the development key file still holds the old key")
	}
	if _, errOut, code := set("AFTER_ROTATION", "v2"); code != 0 {
		t.Errorf("secret set after rotation = %d %q", code, errOut)
	}
	d.mustHelmr("secret", "delete", "API_TOKEN", "--project", "vaulted")
	if _, errOut, code := d.helmr("secret", "delete", "API_TOKEN", "--project", "vaulted"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("second delete = %d %q", code, errOut)
	}
	if list := d.mustHelmr("secret", "list", "--project", "vaulted"); strings.Contains(list, "API_TOKEN") || !strings.Contains(list, "AFTER_ROTATION") {
		t.Errorf("secret list after delete = %q", list)
	}
}
