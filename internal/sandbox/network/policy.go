package network

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Mode is the kind of an egress policy.
type Mode string

// Egress policy modes.
const (
	// Open: DNS and outbound connections to any address except the
	// never-reachable ones (see Guard).
	Open Mode = "open"
	// None: no interface but loopback.
	None Mode = "none"
	// Allowlist: DNS only for the listed domains, connections only to
	// the listed CIDRs and to addresses those domains resolved to.
	Allowlist Mode = "allowlist"
)

// Policy is an operator's egress policy for sandboxes.
type Policy struct {
	Mode     Mode
	Prefixes []netip.Prefix // Allowlist: reachable networks
	// Domains (Allowlist) are lower-case names without a trailing dot;
	// "*.example.com" matches every name below example.com (not
	// example.com itself).
	Domains []string
}

// ParsePolicy reads a policy as the operator writes it: "open", "none",
// or "allow:" followed by comma-separated CIDRs, IP addresses and domain
// names ("allow:10.1.0.0/16,203.0.113.7,registry.npmjs.org,*.github.com").
func ParsePolicy(s string) (Policy, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", string(Open):
		return Policy{Mode: Open}, nil
	case string(None):
		return Policy{Mode: None}, nil
	}
	list, ok := strings.CutPrefix(s, "allow:")
	if !ok {
		return Policy{}, fmt.Errorf("egress policy %q: want open, none or allow:ENTRY,... (CIDRs, IP addresses, domain names)", s)
	}
	p := Policy{Mode: Allowlist}
	for _, e := range strings.Split(list, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if err := p.add(e); err != nil {
			return Policy{}, fmt.Errorf("egress policy: %w", err)
		}
	}
	if len(p.Prefixes) == 0 && len(p.Domains) == 0 {
		return Policy{}, errors.New("egress policy: allow: lists nothing (use none to deny everything)")
	}
	return p, nil
}

func (p *Policy) add(e string) error {
	if pfx, err := netip.ParsePrefix(e); err == nil {
		p.Prefixes = append(p.Prefixes, pfx.Masked())
		return nil
	}
	if a, err := netip.ParseAddr(e); err == nil {
		a = a.Unmap()
		p.Prefixes = append(p.Prefixes, netip.PrefixFrom(a, a.BitLen()))
		return nil
	}
	if strings.ContainsAny(e, "/:") {
		return fmt.Errorf("%q is neither a CIDR, an IP address nor a domain name", e)
	}
	name := strings.TrimSuffix(strings.ToLower(e), ".")
	if !validDomain(strings.TrimPrefix(name, "*.")) {
		return fmt.Errorf("%q is not a domain name (letters, digits, '-', dot-separated; '*.' only as the first label)", e)
	}
	p.Domains = append(p.Domains, name)
	return nil
}

func validDomain(n string) bool {
	if n == "" || len(n) > 253 {
		return false
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// String is the policy in ParsePolicy's syntax.
func (p Policy) String() string {
	if p.Mode != Allowlist {
		if p.Mode == "" {
			return string(Open)
		}
		return string(p.Mode)
	}
	var parts []string
	for _, pfx := range p.Prefixes {
		if pfx.IsSingleIP() {
			parts = append(parts, pfx.Addr().String())
		} else {
			parts = append(parts, pfx.String())
		}
	}
	return "allow:" + strings.Join(append(parts, p.Domains...), ",")
}

// AllowsName reports whether the policy lets the sandbox resolve name.
func (p Policy) AllowsName(name string) bool {
	switch p.Mode {
	case Open, "":
		return true
	case None:
		return false
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	for _, d := range p.Domains {
		if sub, ok := strings.CutPrefix(d, "*."); ok {
			if strings.HasSuffix(name, "."+sub) {
				return true
			}
		} else if name == d {
			return true
		}
	}
	return false
}

// allowsPrefix reports whether a is in one of the policy's networks (Open:
// every address). Names resolved through the sandbox's DNS are checked
// separately.
func (p Policy) allowsPrefix(a netip.Addr) bool {
	switch p.Mode {
	case Open, "":
		return true
	case None:
		return false
	}
	for _, pfx := range p.Prefixes {
		if pfx.Contains(a) {
			return true
		}
	}
	return false
}
