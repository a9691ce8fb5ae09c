package vault

import (
	"fmt"
	"slices"
	"strings"
)

// Egress binds a secret for egress injection: its value never enters a
// sandbox; the worker's network stack puts it into HTTPS requests to
// Hosts in place of the placeholder the sandbox holds (in headers, and
// in bodies with Body).
type Egress struct {
	// Hosts are lower-case domain names; "*.example.com" stands for every
	// name below example.com (not example.com itself).
	Hosts []string `json:"hosts"`
	// Body allows substitution in request bodies too (default: headers
	// only, Basic credentials included).
	Body bool `json:"body,omitempty"`
}

// MaxEgressHosts bounds the hosts of one rule.
const MaxEgressHosts = 64

// Normalize returns e with its hosts checked, lower-cased, sorted and
// deduplicated, or an error naming the host that is not one.
func (e Egress) Normalize() (Egress, error) {
	if len(e.Hosts) == 0 {
		return Egress{}, fmt.Errorf("an egress rule names at least one host")
	}
	if len(e.Hosts) > MaxEgressHosts {
		return Egress{}, fmt.Errorf("an egress rule names at most %d hosts, got %d", MaxEgressHosts, len(e.Hosts))
	}
	out := Egress{Body: e.Body}
	for _, h := range e.Hosts {
		n := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		if why := HostProblem(n); why != "" {
			return Egress{}, fmt.Errorf("host %q: %s", h, why)
		}
		out.Hosts = append(out.Hosts, n)
	}
	slices.Sort(out.Hosts)
	out.Hosts = slices.Compact(out.Hosts)
	return out, nil
}

// HostProblem says why pattern is not a host an egress rule may name, or
// "": a domain name (letters, digits, '-', '_', dot-separated labels of
// at most 63), optionally "*." and then a name of two labels or more. No
// IP addresses (credentials are bound to names, which TLS verifies), no
// ports, no bare "*".
func HostProblem(pattern string) string {
	n, wild := strings.CutPrefix(pattern, "*.")
	if n == "" || len(n) > 253 {
		return "not a domain name"
	}
	labels := strings.Split(n, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "not a domain name (letters, digits, '-', dot-separated; '*.' only as the first label)"
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "not a domain name (letters, digits, '-', dot-separated; '*.' only as the first label)"
			}
		}
	}
	if wild && len(labels) < 2 {
		return "a wildcard covers names below a domain of two labels or more (*.example.com)"
	}
	if allDigits := strings.Trim(strings.ReplaceAll(n, ".", ""), "0123456789") == ""; allDigits {
		return "an IP address: bind credentials to host names, which TLS verifies"
	}
	return ""
}

// Matches reports whether the host name is one of e's hosts.
func (e Egress) Matches(name string) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, h := range e.Hosts {
		if matchHost(h, name) {
			return true
		}
	}
	return false
}

func matchHost(pattern, name string) bool {
	if sub, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(name, "."+sub)
	}
	return pattern == name
}

// Covers reports whether every name pattern p stands for is one of e's
// hosts: p itself is, or p is a wildcard inside one of e's wildcards.
func (e Egress) Covers(p string) bool {
	sub, wild := strings.CutPrefix(p, "*.")
	for _, h := range e.Hosts {
		if !wild && matchHost(h, p) || wild && (h == p || strings.HasPrefix(h, "*.") && matchHost(h, sub)) {
			return true
		}
	}
	return false
}

// SplitLine splits a value for egress into the line that goes into
// requests and its line ending ("\n", "\r\n" or ""): false if the value
// is not one line of text (a control character), which
// no request header may carry.
func SplitLine(v []byte) (line, ending string, ok bool) {
	line = string(v)
	for _, e := range []string{"\r\n", "\n"} {
		if l, cut := strings.CutSuffix(line, e); cut {
			line, ending = l, e
			break
		}
	}
	if line == "" {
		return "", "", false
	}
	for i := 0; i < len(line); i++ {
		if c := line[i]; c < 0x20 || c == 0x7f {
			return "", "", false
		}
	}
	return line, ending, true
}
