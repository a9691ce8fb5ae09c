package network

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"strings"
)

// Credential is a secret value the worker's stack puts into requests to
// its hosts in place of its placeholder. The value never enters the
// sandbox.
type Credential struct {
	Name        string   // the secret's name, for notices ("GITHUB_TOKEN")
	Placeholder string   // what the sandbox holds (NewPlaceholder)
	Value       string   //
	Hosts       []string // lower-case names, "*.example.com" = any name below it
	Body        bool     // also substitute in request bodies (default: headers only)
}

// validate reports a credential the injector cannot use.
func (c Credential) validate() error {
	switch {
	case c.Name == "":
		return errors.New("credential without a name")
	case c.Value == "" || c.Placeholder == "":
		return fmt.Errorf("credential %s: empty value or placeholder", c.Name)
	case c.Placeholder == c.Value || strings.Contains(c.Placeholder, c.Value) || strings.Contains(c.Value, c.Placeholder):
		return fmt.Errorf("credential %s: the placeholder and the value contain one another", c.Name)
	case len(c.Hosts) == 0:
		return fmt.Errorf("credential %s: no hosts", c.Name)
	}
	if i := strings.IndexFunc(c.Value, isControl); i >= 0 {
		return fmt.Errorf("credential %s: the value has a control character", c.Name)
	}
	for _, h := range c.Hosts {
		if why := ValidHost(h); why != "" {
			return fmt.Errorf("credential %s: host %q: %s", c.Name, h, why)
		}
	}
	return nil
}

// minRandom is how many random letters and digits a placeholder has at
// least.
const minRandom = 16

// NewPlaceholder returns a random stand-in for value that tools accept
// where they accept the value: the same character classes position by
// position (a letter stays a letter of the same case, a digit a digit,
// other bytes stay as they are, so the dots of a JWT keep their shape,
// and a token's type marker such as "ghp_", "sk-" or "xoxb-" is kept as
// it is: see typePrefix), the same length when
// the value has at least 16 letters and digits (so Content-Length and
// Basic auth lengths do not change), and otherwise padded at the end with
// random letters and digits up to 16 random positions. It is never equal
// to value and never contains it. Only single-line values: a value with a
// control character (CR, LF, NUL ...) cannot go in a header and is an
// error, as is one without a letter or a digit.
func NewPlaceholder(value string) (string, error) {
	if value == "" {
		return "", errors.New("placeholder: empty value")
	}
	if strings.IndexFunc(value, isControl) >= 0 {
		return "", errors.New("placeholder: the value has a control character (only single-line values can be injected into headers)")
	}
	alnum := 0
	for i := 0; i < len(value); i++ {
		if classOf(value[i]) != "" {
			alnum++
		}
	}
	if alnum == 0 {
		return "", errors.New("placeholder: the value has no letter or digit to stand in for")
	}
	keep := typePrefix(value)
	for range 100 {
		b := []byte(value)
		for i, c := range b {
			if class := classOf(c); class != "" && i >= keep {
				b[i] = randomOf(class)
			}
		}
		for range minRandom - alnum {
			b = append(b, randomOf(alnumClass))
		}
		p := string(b)
		if !strings.Contains(p, value) {
			return p, nil
		}
	}
	return "", errors.New("placeholder: no random stand-in differs from the value")
}

// typePrefix is how many leading bytes of value are a token's type
// marker, which tools may check and which say nothing secret ("ghp_",
// "sk-", "xoxb-", "glpat-", "npm_"): 2 to 10 letters and the first '_'
// or '-', kept only when at least minRandom letters and digits follow,
// so the placeholder stays as random as any other. 0 if none.
func typePrefix(value string) int {
	i := strings.IndexAny(value, "_-")
	if i < 2 || i > 10 {
		return 0
	}
	for _, c := range []byte(value[:i]) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return 0
		}
	}
	rest := 0
	for _, c := range []byte(value[i+1:]) {
		if classOf(c) != "" {
			rest++
		}
	}
	if rest < minRandom {
		return 0
	}
	return i + 1
}

const (
	lowerClass = "abcdefghijklmnopqrstuvwxyz"
	upperClass = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	digitClass = "0123456789"
	alnumClass = lowerClass + upperClass + digitClass
)

func classOf(c byte) string {
	switch {
	case c >= 'a' && c <= 'z':
		return lowerClass
	case c >= 'A' && c <= 'Z':
		return upperClass
	case c >= '0' && c <= '9':
		return digitClass
	}
	return ""
}

func randomOf(class string) byte {
	n, err := rand.Int(rand.Reader, big.NewInt(int64(len(class))))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return class[n.Int64()]
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// ValidHost reports why a credential's host pattern is unusable ("" if
// fine): a lower-case domain name in the syntax egress policies use
// ("api.github.com", "*.github.com"), no IP address, no port, no bare "*".
func ValidHost(pattern string) string {
	switch {
	case pattern == "":
		return "empty host"
	case pattern == "*" || pattern == "*.":
		return "a bare * would send the credential anywhere"
	case strings.ToLower(pattern) != pattern:
		return "host names are written in lower case"
	case strings.HasSuffix(pattern, "."):
		return "no trailing dot"
	}
	if _, err := netip.ParseAddr(strings.Trim(pattern, "[]")); err == nil {
		return "an IP address, not a host name (credentials are bound to names, which TLS verifies)"
	}
	if strings.Contains(pattern, ":") {
		return "no port (a credential holds for every port of its hosts)"
	}
	if strings.Contains(pattern, "/") {
		return "a host name, not a URL or a network"
	}
	if !validDomain(strings.TrimPrefix(pattern, "*.")) {
		return "not a domain name (letters, digits, '-', dot-separated; '*.' only as the first label)"
	}
	return ""
}

// hostMatches reports whether name (any case, maybe with a trailing dot
// or a port) is one of patterns.
func hostMatches(patterns []string, name string) bool {
	name = canonicalHost(name)
	if name == "" {
		return false
	}
	for _, p := range patterns {
		if sub, ok := strings.CutPrefix(p, "*."); ok {
			if strings.HasSuffix(name, "."+sub) {
				return true
			}
		} else if name == p {
			return true
		}
	}
	return false
}

// canonicalHost is a Host header's or SNI's name in lower case without
// port and trailing dot; "" for an IP address or nothing.
func canonicalHost(h string) string {
	if host, port, ok := strings.Cut(h, ":"); ok && !strings.Contains(port, ":") {
		h = host
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if _, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil || strings.ContainsAny(h, "[]:") {
		return ""
	}
	return h
}
