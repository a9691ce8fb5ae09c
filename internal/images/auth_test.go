package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/testenv"
)

const (
	regUser  = "ci-bot"
	regPass  = "s3cret-Pa55word"
	regToken = "tok-9f8e7d6c5b4a"
)

// privateRegistry serves an in-process registry, holding testImage at
// team/base:v1, that answers only requests allow accepts (the others get
// 401 with challenge, which may use %s for the server's host). It returns
// the image's reference and the registry's host.
func privateRegistry(t *testing.T, challenge string, allow func(*http.Request) bool, push authn.Authenticator) (string, string) {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allow(r) {
			w.Header().Set("WWW-Authenticate", strings.ReplaceAll(challenge, "%s", r.Host))
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	ref := u.Host + "/team/base:v1"
	tag, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, testImage(t), remote.WithAuth(push)); err != nil {
		t.Fatalf("push to the private registry: %v", err)
	}
	return ref, u.Host
}

// basicRegistry requires basic auth as regUser:regPass.
func basicRegistry(t *testing.T) (string, string) {
	return privateRegistry(t, `Basic realm="test"`, func(r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		return ok && u == regUser && p == regPass
	}, authn.FromConfig(authn.AuthConfig{Username: regUser, Password: regPass}))
}

// bearerRegistry requires the bearer token regToken (and hands out no
// other: its token endpoint refuses everyone).
func bearerRegistry(t *testing.T) (string, string) {
	return privateRegistry(t, `Bearer realm="http://%s/token",service="test"`, func(r *http.Request) bool {
		return r.Header.Get("Authorization") == "Bearer "+regToken
	}, authn.FromConfig(authn.AuthConfig{RegistryToken: regToken}))
}

// fakeVault is a build's Secret func over fixed values, recording the names
// asked for.
type fakeVault struct {
	values map[string]string
	asked  []string
}

func (v *fakeVault) secret(_ context.Context, name string) (SecretValue, error) {
	v.asked = append(v.asked, name)
	val, ok := v.values[name]
	if !ok {
		return SecretValue{}, fmt.Errorf("secret %s: not found", name)
	}
	return SecretValue{Value: []byte(val)}, nil
}

func fromCreds(ref, creds string) *deployments.ImageManifest {
	return &deployments.ImageManifest{Name: "app", Steps: []deployments.Step{{Kind: deployments.StepFrom, Ref: ref, Credentials: creds}}}
}

func TestParseCredentials(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  authn.AuthConfig
		ok    bool
	}{
		{`{"username":"u","password":"p"}`, authn.AuthConfig{Username: "u", Password: "p"}, true},
		{" {\"username\": \"u\", \"password\": \"p:q\"}\n", authn.AuthConfig{Username: "u", Password: "p:q"}, true},
		{`{"token":"t"}`, authn.AuthConfig{RegistryToken: "t"}, true},
		{"u:p", authn.AuthConfig{Username: "u", Password: "p"}, true},
		{"u:p:q\n", authn.AuthConfig{Username: "u", Password: "p:q"}, true},
		{"u:p\r\n", authn.AuthConfig{Username: "u", Password: "p"}, true},
		{`{"username":"u"}`, authn.AuthConfig{}, false},
		{`{"password":"p"}`, authn.AuthConfig{}, false},
		{`{"token":"t","username":"u","password":"p"}`, authn.AuthConfig{}, false},
		{`{"user":"u","pass":"p"}`, authn.AuthConfig{}, false},
		{`{"token":"t"} {}`, authn.AuthConfig{}, false},
		{`{"token":`, authn.AuthConfig{}, false},
		{"just-a-password", authn.AuthConfig{}, false},
		{":p", authn.AuthConfig{}, false},
		{"u:", authn.AuthConfig{}, false},
		{"", authn.AuthConfig{}, false},
	} {
		got, ok := parseCredentials([]byte(tc.value))
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseCredentials(%q) = %+v, %v, want %+v, %v", tc.value, got, ok, tc.want, tc.ok)
		}
	}
}

// TestRegistryCredentialsRefused covers the pulls that must fail, each with
// an error that says why and never holds a secret's value.
func TestRegistryCredentialsRefused(t *testing.T) {
	basicRef, basicHost := basicRegistry(t)
	bearerRef, bearerHost := bearerRegistry(t)
	for _, tc := range []struct {
		name, ref, creds, value string
		want                    string
	}{
		{name: "basic, anonymous", ref: basicRef,
			want: "registry " + basicHost + " needs credentials (401 Unauthorized): declare from(ref, { credentials: \"SECRET\" })"},
		{name: "bearer, anonymous", ref: bearerRef,
			want: "registry " + bearerHost + " needs credentials"},
		{name: "basic, wrong password", ref: basicRef, creds: "REG_AUTH", value: `{"username":"ci-bot","password":"not-the-Pa55word"}`,
			want: "registry " + basicHost + " refused the credentials in secret REG_AUTH (401 Unauthorized)"},
		{name: "basic, wrong user:password", ref: basicRef, creds: "REG_AUTH", value: "someone:" + regPass,
			want: "refused the credentials in secret REG_AUTH"},
		{name: "bearer, wrong token", ref: bearerRef, creds: "REG_TOKEN", value: `{"token":"tok-wrong-0000"}`,
			want: "registry " + bearerHost + " refused the credentials in secret REG_TOKEN"},
		{name: "malformed JSON", ref: basicRef, creds: "REG_AUTH", value: `{"username":"ci-bot","password":"leaky-Pa55`,
			want: "secret REG_AUTH " + errCredentialsFormat},
		{name: "JSON missing the password", ref: basicRef, creds: "REG_AUTH", value: `{"username":"ci-bot-leaky"}`,
			want: "secret REG_AUTH " + errCredentialsFormat},
		{name: "no colon", ref: basicRef, creds: "REG_AUTH", value: "leaky-Pa55word-alone",
			want: "secret REG_AUTH " + errCredentialsFormat},
		{name: "secret not in the vault", ref: basicRef, creds: "ABSENT",
			want: "registry credentials ABSENT: secret ABSENT: not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &fakeVault{values: map[string]string{}}
			if tc.creds != "" && tc.value != "" {
				v.values[tc.creds] = tc.value
			}
			_, err := testResolver(t).Prepare(context.Background(), fromCreds(tc.ref, tc.creds), nil, PrepareOptions{Secret: v.secret})
			if err == nil || !errors.Is(err, ErrPreparation) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Prepare(from %s, credentials %q) = %v, want an ErrPreparation containing %q", tc.ref, tc.creds, err, tc.want)
			}
			for _, leak := range []string{tc.value, regPass, regToken, "leaky", "not-the-Pa55word", "tok-wrong"} {
				if leak != "" && strings.Contains(err.Error(), leak) {
					t.Errorf("the error holds %q: %v", leak, err)
				}
			}
			if tc.creds != "" && (len(v.asked) != 1 || v.asked[0] != tc.creds) {
				t.Errorf("secrets asked for = %v, want [%s]", v.asked, tc.creds)
			}
		})
	}
	// Credentials with no vault to read them from.
	_, err := testResolver(t).Prepare(context.Background(), fromCreds(basicRef, "REG_AUTH"), nil, PrepareOptions{})
	if err == nil || !strings.Contains(err.Error(), "registry credentials REG_AUTH: this build has no vault") {
		t.Errorf("Prepare without a Secret func = %v, want the no-vault error", err)
	}
}

// TestRegistryCredentials pulls from private registries with each accepted
// form of credentials.
func TestRegistryCredentials(t *testing.T) {
	testenv.RequireRoot(t) // unpacking keeps owners
	basicRef, basicHost := basicRegistry(t)
	bearerRef, _ := bearerRegistry(t)
	for _, tc := range []struct{ name, ref, value string }{
		{"basic, JSON", basicRef, `{"username":"` + regUser + `","password":"` + regPass + `"}`},
		{"basic, user:password", basicRef, regUser + ":" + regPass + "\n"},
		{"bearer token", bearerRef, `{"token":"` + regToken + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testResolver(t)
			v := &fakeVault{values: map[string]string{"REG_AUTH": tc.value}}
			got, err := r.Prepare(context.Background(), fromCreds(tc.ref, "REG_AUTH"), nil, PrepareOptions{Secret: v.secret})
			if err != nil {
				t.Fatal(err)
			}
			checkTestImage(t, got)
			want, err := testImage(t).Digest()
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(filepath.Dir(got.Layers[0]), "base-"+want.Hex) {
				t.Errorf("unpacked base %s, want the pushed image's digest %s", got.Layers[0], want)
			}
			noSecretIn(t, r.LayersDir, got.Digest, regPass, regToken)
			// The unpacked base is no way around the registry: without the
			// credentials the same reference is still refused.
			_, err = r.Prepare(context.Background(), fromCreds(tc.ref, ""), nil, PrepareOptions{})
			if err == nil || !strings.Contains(err.Error(), "needs credentials") {
				t.Errorf("anonymous pull after a pull with credentials = %v, want needs credentials", err)
			}
		})
	}
	t.Run("copyFrom source image", func(t *testing.T) {
		r := testResolver(t)
		v := &fakeVault{values: map[string]string{"TOOLS_AUTH": regUser + ":" + regPass}}
		app := &deployments.ImageManifest{Name: "app", Steps: []deployments.Step{
			{Kind: deployments.StepFrom, Ref: "helmr/tiny"},
			{Kind: deployments.StepCopyFrom, Image: fromCreds(basicRef, "TOOLS_AUTH"), Src: "/usr/bin/tool", Dest: "/opt/tool"},
		}}
		got, err := r.Prepare(context.Background(), app, nil, PrepareOptions{Secret: v.secret})
		if err != nil {
			t.Fatalf("copyFrom an image of registry %s with credentials: %v", basicHost, err)
		}
		if p, ok := got.Lookup("/opt/tool"); !ok {
			t.Error("/opt/tool missing: the source image's file was not copied")
		} else if data, _ := os.ReadFile(p); string(data) != "#!/bin/sh\n" {
			t.Errorf("/opt/tool = %q, want the source image's file", data)
		}
		noSecretIn(t, r.LayersDir, got.Digest, regPass)
	})
}

// noSecretIn fails if a file name or file under dir, or the digest, holds
// one of the values.
func noSecretIn(t *testing.T, dir, digest string, values ...string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var data []byte
		if d.Type().IsRegular() {
			if data, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		for _, v := range values {
			if strings.Contains(p, v) || strings.Contains(string(data), v) {
				t.Errorf("%s holds a registry secret", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if strings.Contains(digest, v) {
			t.Errorf("the image digest %s holds a registry secret", digest)
		}
	}
}

func TestPullErrorHidesCredentials(t *testing.T) {
	inner := fmt.Errorf("Get https://r.example/v2/: proxy said %s and %s", regPass, regToken)
	err := pullError(inner, "r.example", "REG_AUTH", []string{"", regPass, regToken})
	if got := err.Error(); strings.Contains(got, regPass) || strings.Contains(got, regToken) || !strings.Contains(got, "proxy said [redacted credentials]") {
		t.Errorf("pullError(%q) = %q, want the values redacted", inner, got)
	}
	plain := errors.New("connection refused")
	if err := pullError(plain, "r.example", "", nil); err != plain {
		t.Errorf("pullError(%v) = %v, want it unchanged", plain, err)
	}
}
