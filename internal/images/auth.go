package images

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Registry credentials are a vault secret a from step names. Its value is
// one of:
//
//	{"username": "ci-bot", "password": "..."}   basic credentials (JSON)
//	{"token": "..."}                            a registry bearer token (JSON)
//	ci-bot:...                                  user:password (one trailing newline ignored)
//
// The value is read for the pull only: it never enters a layer, a cache key,
// the build log or an error.

// errCredentialsFormat says what a credentials secret must hold, without
// anything of what it does hold.
const errCredentialsFormat = `must be JSON {"username": "...", "password": "..."}, JSON {"token": "..."} or user:password`

// registryCredentials fetches the credentials secret name through opts and
// returns the authenticator to pull with and the strings that must never
// be shown (the value and its parts).
func registryCredentials(ctx context.Context, name string, opts PrepareOptions) (authn.Authenticator, []string, error) {
	if opts.Secret == nil {
		return nil, nil, fmt.Errorf("registry credentials %s: this build has no vault to read them from", name)
	}
	sv, err := opts.Secret(ctx, name)
	if err != nil {
		return nil, nil, fmt.Errorf("registry credentials %s: %w", name, err)
	}
	v := sv.Value // the worker pulls: the value stays outside sandboxes
	cfg, ok := parseCredentials(v)
	if !ok {
		return nil, nil, fmt.Errorf("registry credentials: secret %s %s", name, errCredentialsFormat)
	}
	hidden := []string{string(v), cfg.Password, cfg.RegistryToken}
	return authn.FromConfig(cfg), hidden, nil
}

// parseCredentials reads a credentials secret's value. It reports only
// whether the value has a known form: errors from decoding could quote it.
func parseCredentials(v []byte) (authn.AuthConfig, bool) {
	if t := bytes.TrimSpace(v); len(t) > 0 && t[0] == '{' {
		var c struct {
			Username string `json:"username"`
			Password string `json:"password"`
			Token    string `json:"token"`
		}
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil || dec.More() {
			return authn.AuthConfig{}, false
		}
		switch {
		case c.Token != "" && c.Username == "" && c.Password == "":
			return authn.AuthConfig{RegistryToken: c.Token}, true
		case c.Token == "" && c.Username != "" && c.Password != "":
			return authn.AuthConfig{Username: c.Username, Password: c.Password}, true
		}
		return authn.AuthConfig{}, false
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(v), "\n"), "\r")
	user, pass, ok := strings.Cut(s, ":")
	if !ok || user == "" || pass == "" || strings.ContainsAny(user, "\n\r") {
		return authn.AuthConfig{}, false
	}
	return authn.AuthConfig{Username: user, Password: pass}, true
}

// pullError explains a failed pull from registry: a refusal names the
// credentials secret (or says to declare one), and no hidden string
// survives in the message.
func pullError(err error, registry, secret string, hidden []string) error {
	var terr *transport.Error
	if errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden) {
		if secret != "" {
			return fmt.Errorf("registry %s refused the credentials in secret %s (%d %s)", registry, secret, terr.StatusCode, http.StatusText(terr.StatusCode))
		}
		return fmt.Errorf("registry %s needs credentials (%d %s): declare from(ref, { credentials: \"SECRET\" }) naming a vault secret that holds them",
			registry, terr.StatusCode, http.StatusText(terr.StatusCode))
	}
	msg := err.Error()
	redacted := msg
	for _, h := range hidden {
		if h != "" {
			redacted = strings.ReplaceAll(redacted, h, "[redacted credentials]")
		}
	}
	if redacted != msg {
		return errors.New(redacted)
	}
	return err
}
