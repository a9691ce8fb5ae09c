package apikeys

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

func TestParseGrants(t *testing.T) {
	got, err := ParseGrants([]string{"runs:read", "runs:create", "runs:read"})
	if err != nil || len(got) != 2 || got[0] != RunsCreate || got[1] != RunsRead {
		t.Errorf("ParseGrants(runs:read,runs:create,runs:read) = %v, %v; want [runs:create runs:read]", got, err)
	}
	for _, bad := range [][]string{nil, {"runs:write"}, {"runs:read", ""}, {"RUNS:READ"}} {
		if _, err := ParseGrants(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseGrants(%q) error = %v, want errdefs.ErrInvalid", bad, err)
		}
	}
	if _, err := ParseGrants([]string{"admin"}); err == nil || !strings.Contains(err.Error(), `unknown grant "admin"`) || !strings.Contains(err.Error(), "tasks:deploy") {
		t.Errorf("ParseGrants(admin) error = %v, want it to name the grant and list the known ones", err)
	}
}

func TestParseTTL(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "12h": 12 * time.Hour, "90m": 90 * time.Minute, "9999d": 9999 * 24 * time.Hour} {
		if got, err := ParseTTL(in); err != nil || got != want {
			t.Errorf("ParseTTL(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0d", "-1d", "30", "1w", "d", "10000d", "999999999999999999d", "soon", "+5d", "05d", "1h30m", "1.5h", "300ms", " 1d"} {
		if got, err := ParseTTL(bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ParseTTL(%q) = %v, %v; want errdefs.ErrInvalid", bad, got, err)
		}
	}
}

func TestKeyFormat(t *testing.T) {
	id, secret, tok := newKey(KindAPI)
	kind, gotID, gotSecret, ok := parseKey(tok)
	if !ok || kind != KindAPI || gotID != id || gotSecret != secret {
		t.Fatalf("parseKey(newKey()) = %q, %q, %q, %v; want %q, %q", kind, gotID, gotSecret, ok, id, secret)
	}
	wid, _, wtok := newKey(KindWorker)
	if kind, _, _, ok := parseKey(wtok); !ok || kind != KindWorker || !strings.HasPrefix(wtok, "hw_") {
		t.Errorf("parseKey(%q) = %q, %v; want a worker credential", wtok, kind, ok)
	}
	if got, ok := WorkerCredentialID(wtok); !ok || got != wid {
		t.Errorf("WorkerCredentialID(%q) = %q, %v; want %q", wtok, got, ok, wid)
	}
	if _, ok := WorkerCredentialID(tok); ok {
		t.Errorf("WorkerCredentialID(an API key) ok, want not a worker credential")
	}
	if _, _, tok2 := newKey(KindAPI); tok2 == tok {
		t.Errorf("newKey() twice = %q both times", tok)
	}
	for _, bad := range []string{"", "hk_", "hk_" + id, "hk_" + id + "_", "hk_" + id + "_" + secret + "x",
		"hk_" + id + "x_" + secret[1:], "hk_" + strings.ToUpper(id) + "_" + secret, "xx_" + id + "_" + secret,
		"hk_" + id + "_" + secret[1:] + "u", tok + " "} {
		if _, _, _, ok := parseKey(bad); ok {
			t.Errorf("parseKey(%q) ok, want malformed", bad)
		}
	}
}

func TestLoadOwnerToken(t *testing.T) {
	long := strings.Repeat("x", MinOwnerTokenLen)
	if got, err := LoadOwnerToken(long, ""); err != nil || got != long {
		t.Errorf("LoadOwnerToken(32 chars) = %q, %v", got, err)
	}
	for _, bad := range []string{"", "admin", strings.Repeat("x", MinOwnerTokenLen-1), long + " x"} {
		if _, err := LoadOwnerToken(bad, ""); err == nil {
			t.Errorf("LoadOwnerToken(%q) = nil error, want a refusal", bad)
		}
	}
	if tok := NewOwnerToken(); len(tok) < MinOwnerTokenLen {
		t.Errorf("NewOwnerToken() = %d characters, want at least %d", len(tok), MinOwnerTokenLen)
	}
}

func TestE2BSpelling(t *testing.T) {
	id, secret, tok := newKey(KindAPI)
	e2b, ok := E2BSpelling(tok)
	if !ok || !strings.HasPrefix(e2b, "e2b_") || len(e2b) != 4+2*(10+32) || strings.Trim(e2b[4:], "0123456789abcdef") != "" {
		t.Fatalf("E2BSpelling(%q) = %q, %v; want e2b_ and 84 lower-case hex", tok, e2b, ok)
	}
	kind, gotID, gotSecret, ok := parseKey(e2b)
	if !ok || kind != KindAPI || gotID != id || gotSecret != secret {
		t.Errorf("parseKey(e2b spelling) = %q %q %q %v, want the same key", kind, gotID, gotSecret, ok)
	}
	_, _, wtok := newKey(KindWorker)
	if _, ok := E2BSpelling(wtok); ok {
		t.Error("a worker credential got an E2B spelling")
	}
	for _, bad := range []string{e2b[:len(e2b)-2], strings.ToUpper(e2b[:5]) + e2b[5:], "e2b_" + strings.ToUpper(e2b[4:]), e2b + "00", "e2b_zz" + e2b[6:]} {
		if _, _, _, ok := parseKey(bad); ok {
			t.Errorf("parseKey(%q) took a malformed E2B key", bad)
		}
	}
}
