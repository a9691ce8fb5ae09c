package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/httpapi"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
)

// cliEnv runs the CLI against a real API over a SQLite store.
type cliEnv struct {
	t     *testing.T
	url   string
	st    *sqlite.Store
	env   map[string]string
	owner string
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "helmr.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	owner := apikeys.NewOwnerToken()
	log := slog.New(slog.DiscardHandler)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Runs: runs.NewService(st, st, st, runs.NewBroker(), log), Deployments: st,
		Logger: log, APIKeys: apikeys.NewService(st, owner, log)}))
	t.Cleanup(srv.Close)
	return &cliEnv{t: t, url: srv.URL, st: st, owner: owner, env: map[string]string{
		"HELMR_URL": srv.URL, "HELMR_API_KEY": owner, "HELMR_PROFILE": filepath.Join(t.TempDir(), "profile.json"),
		"HELMR_CONFIG": filepath.Join(t.TempDir(), "none.conf"),
	}}
}

func (e *cliEnv) helmr(args ...string) (string, string, int) {
	e.t.Helper()
	var out, errb bytes.Buffer
	a := &App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string {
		if k == "HELMR_CONFIG" {
			return "" // no operator file
		}
		return e.env[k]
	}}
	code := a.Main(context.Background(), args)
	return out.String(), errb.String(), code
}

func (e *cliEnv) keys() []apikeys.Key {
	e.t.Helper()
	ks, err := e.st.ListAPIKeys(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return ks
}

var keyPattern = regexp.MustCompile(`^hk_[0-9a-z]{16}_[0-9a-z]{52}$`)

func TestAPIKeyCommands(t *testing.T) {
	e := newCLIEnv(t)
	out, errOut, code := e.helmr("apikey", "create", "--project", "p", "--env", "prod", "--grant", "runs:create, runs:read", "--expires", "30d", "--name", "ci")
	key := strings.TrimSpace(out)
	if code != 0 || !keyPattern.MatchString(key) || !strings.Contains(errOut, "shown this once") || !strings.Contains(errOut, "p/prod") {
		t.Fatalf("apikey create = %d, stdout %q, stderr %q; want the key alone on stdout", code, out, errOut)
	}
	out, _, code = e.helmr("apikey", "create", "--project", "p", "--grant", "secrets:write", "--json")
	var created struct {
		Key    string      `json:"key"`
		APIKey apikeys.Key `json:"apiKey"`
	}
	if err := json.Unmarshal([]byte(out), &created); code != 0 || err != nil || !keyPattern.MatchString(created.Key) || created.APIKey.Env != "dev" {
		t.Fatalf("apikey create --json = %d %q (%v), want the key and its dev metadata", code, out, err)
	}

	// Bad input: a clear error, nothing stored.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--grant", "runs:read,runs:delete"}, `unknown grant "runs:delete"`},
		{[]string{"--grant", "runs:read", "--expires", "1month"}, `expiry "1month"`},
		{[]string{"--grant", "runs:read", "--expires", "-1d"}, `expiry "-1d"`},
		{[]string{"--grant", "runs:read", "--name", "my key"}, `name "my key"`},
		{[]string{}, "usage: helmr apikey create"},
	} {
		args := append([]string{"apikey", "create", "--project", "p", "--env", "prod"}, c.args...)
		if _, errOut, code := e.helmr(args...); code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("helmr %s = %d %q, want an error naming %q", strings.Join(args, " "), code, errOut, c.want)
		}
	}
	if n := len(e.keys()); n != 2 {
		t.Errorf("%d keys stored, want the 2 good ones", n)
	}

	id := e.keys()[0].ID
	out, _, code = e.helmr("apikey", "list")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "runs:create,runs:read") || !strings.Contains(out, "p/prod") ||
		strings.Contains(out, key[len(key)-52:]) || strings.Contains(out, created.Key[len(created.Key)-52:]) {
		t.Errorf("apikey list = %d %q, want metadata without the keys", code, out)
	}

	// The key works where it is scoped, nowhere else, and cannot manage keys.
	e.env["HELMR_API_KEY"] = key
	if out, errOut, code := e.helmr("runs", "--project", "p", "--env", "prod"); code != 0 {
		t.Errorf("runs with the key = %d %q %q", code, out, errOut)
	}
	if _, errOut, code := e.helmr("runs", "--project", "p", "--env", "dev"); code == 0 || !strings.Contains(errOut, "scoped to p/prod") {
		t.Errorf("runs in another env with the key = %d %q, want a refusal naming the scope", code, errOut)
	}
	if _, errOut, code := e.helmr("apikey", "list"); code == 0 || !strings.Contains(errOut, "only the owner") {
		t.Errorf("apikey list with an API key = %d %q, want a refusal", code, errOut)
	}
	e.env["HELMR_API_KEY"] = "hk_not-a-key"
	if _, errOut, code := e.helmr("runs", "--project", "p"); code == 0 || !strings.Contains(errOut, "neither the owner credential nor an API key") {
		t.Errorf("runs with a malformed key = %d %q", code, errOut)
	}
	e.env["HELMR_API_KEY"] = ""
	if _, errOut, code := e.helmr("runs", "--project", "p"); code == 0 || !strings.Contains(errOut, "HELMR_API_KEY") {
		t.Errorf("runs without a credential = %d %q, want a hint at HELMR_API_KEY", code, errOut)
	}

	e.env["HELMR_API_KEY"] = e.owner
	out, errOut, code = e.helmr("apikey", "create", "--worker", "--name", "w1")
	if wk := strings.TrimSpace(out); code != 0 || !regexp.MustCompile(`^hw_[0-9a-z]{16}_[0-9a-z]{52}$`).MatchString(wk) || !strings.Contains(errOut, "HELMR_WORKER_TOKEN") {
		t.Errorf("apikey create --worker = %d %q %q", code, out, errOut)
	}
	if _, errOut, code := e.helmr("apikey", "create", "--worker", "--grant", "runs:read"); code == 0 || !strings.Contains(errOut, "no grants") {
		t.Errorf("apikey create --worker --grant = %d %q, want a refusal", code, errOut)
	}
	if out, _, _ := e.helmr("apikey", "list"); !strings.Contains(out, "worker") || !strings.Contains(out, "w1") {
		t.Errorf("apikey list = %q, want the worker credential", out)
	}
	if out, errOut, code := e.helmr("apikey", "revoke", id); code != 0 || !strings.Contains(out, "revoked") {
		t.Fatalf("apikey revoke = %d %q %q", code, out, errOut)
	}
	if k := e.keys()[0]; k.RevokedAt == nil || k.LastUsedAt == nil {
		t.Errorf("after use and revocation: revoked %v, last used %v; want both set", k.RevokedAt, k.LastUsedAt)
	}
	e.env["HELMR_API_KEY"] = key
	if _, errOut, code := e.helmr("runs", "--project", "p", "--env", "prod"); code == 0 || !strings.Contains(errOut, "revoked") {
		t.Errorf("runs with the revoked key = %d %q", code, errOut)
	}
}
