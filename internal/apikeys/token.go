package apikeys

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode"
)

// The prefixes of API keys and worker credentials.
var prefixes = map[Kind]string{KindAPI: "hk_", KindWorker: "hw_"}

// Lengths of a key's parts: a 10-byte id and a 32-byte secret, each in
// lower-case base32.
const (
	idLen     = 16
	secretLen = 52
)

// encoding is lower-case base32 (Crockford's alphabet): no '_', so a key
// splits unambiguously.
var encoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

func random(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return encoding.EncodeToString(b)
}

// newKey returns a new key id, its secret and the key as the client holds
// it (hk_<id>_<secret> or hw_<id>_<secret>).
func newKey(kind Kind) (id, secret, token string) {
	id, secret = random(10), random(32)
	return id, secret, prefixes[kind] + id + "_" + secret
}

// E2BPrefix starts an API key spelled as E2B's SDKs and tools expect
// one: e2b_ and lower-case hex (the id's 10 bytes, then the secret's
// 32). It is the same key as its hk_ spelling: the store keeps one hash.
const E2BPrefix = "e2b_"

// E2BSpelling returns an API key (hk_<id>_<secret>) spelled the E2B way,
// or false if token is not an API key.
func E2BSpelling(token string) (string, bool) {
	kind, id, secret, ok := parseKey(token)
	if !ok || kind != KindAPI {
		return "", false
	}
	idb, err1 := encoding.DecodeString(id)
	secb, err2 := encoding.DecodeString(secret)
	if err1 != nil || err2 != nil {
		return "", false
	}
	return E2BPrefix + hex.EncodeToString(idb) + hex.EncodeToString(secb), true
}

// parseE2B reads an e2b_<hex> spelling back as the key's id and secret.
func parseE2B(token string) (id, secret string, ok bool) {
	h, found := strings.CutPrefix(token, E2BPrefix)
	if !found || len(h) != 2*(10+32) || strings.ToLower(h) != h {
		return "", "", false
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return "", "", false
	}
	return encoding.EncodeToString(b[:10]), encoding.EncodeToString(b[10:]), true
}

// parseKey splits a key into its kind, id and secret, or reports that it
// is not one.
func parseKey(token string) (kind Kind, id, secret string, ok bool) {
	if id, secret, ok := parseE2B(token); ok {
		return KindAPI, id, secret, true
	}
	var rest string
	for k, p := range prefixes {
		if r, found := strings.CutPrefix(token, p); found {
			kind, rest = k, r
		}
	}
	id, secret, ok = strings.Cut(rest, "_")
	if kind == "" || !ok || len(id) != idLen || len(secret) != secretLen || !inAlphabet(id) || !inAlphabet(secret) {
		return "", "", "", false
	}
	return kind, id, secret, true
}

// WorkerCredentialID is the id of a worker credential (hw_<id>_<secret>),
// which prefixes the IDs its workers use.
func WorkerCredentialID(token string) (string, bool) {
	kind, id, _, ok := parseKey(token)
	return id, ok && kind == KindWorker
}

func inAlphabet(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z') || c == 'i' || c == 'l' || c == 'o' || c == 'u' {
			return false
		}
	}
	return true
}

// hash is what the store keeps of a secret.
func hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// MinOwnerTokenLen is the shortest owner credential accepted.
const MinOwnerTokenLen = 32

// NewOwnerToken returns a fresh owner credential.
func NewOwnerToken() string { return "hko_" + random(32) }

// LoadOwnerToken returns the owner credential given as a value or, if
// value is empty, read from file (surrounding whitespace trimmed). It
// must be at least MinOwnerTokenLen characters without whitespace, so no
// default or guessable password passes.
func LoadOwnerToken(value, file string) (string, error) {
	tok := value
	if tok == "" && file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("owner credential file: %w", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	if tok == "" {
		return "", errors.New("no owner credential given")
	}
	if len(tok) < MinOwnerTokenLen || strings.ContainsFunc(tok, unicode.IsSpace) {
		return "", fmt.Errorf("the owner credential must be at least %d characters without spaces (make one with: head -c32 /dev/urandom | base64)", MinOwnerTokenLen)
	}
	return tok, nil
}
