package network

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// Notice kinds.
const (
	// NoticeUnboundHost: a placeholder went to a host its secret is not
	// bound to; it was sent as it was, not substituted.
	NoticeUnboundHost = "unbound-host"
	// NoticePlainHTTP: a placeholder went over plain HTTP to a bound
	// host; credentials go only over TLS, so it was not substituted.
	NoticePlainHTTP = "plain-http"
	// NoticeUpstreamUnverified: the certificate of a bound host did not
	// verify; the sandbox's connection failed.
	NoticeUpstreamUnverified = "upstream-unverified"
	// NoticeBodyNotAllowed: a request body to a bound host carried the
	// placeholder of a secret substituted in headers only.
	NoticeBodyNotAllowed = "body-not-allowed"
)

// Notice is a credential event of a sandbox, for the run's events. It
// never holds a value.
type Notice struct {
	Secret  string // the credential's name
	Host    string
	Kind    string // Notice* constant
	Message string // a sentence for the run's events
}

// Injector is one sandbox's injection state: its CA and the credentials
// its connections get.
type Injector struct {
	cfg *Config
	id  string
	ca  *CA

	mu      sync.Mutex
	next    int
	creds   map[int]Credential
	noticed map[string]bool
	set     atomic.Pointer[credSet]
}

// Injector makes or returns sandboxID's injector (ca is used when it is
// made). The sandbox's Link finds it by that id at connection time, so it
// may be registered before or after the Link exists.
func (c *Config) Injector(sandboxID string, ca *CA) *Injector {
	c.init()
	c.injMu.Lock()
	defer c.injMu.Unlock()
	if inj := c.injectors[sandboxID]; inj != nil {
		return inj
	}
	if c.injectors == nil {
		c.injectors = map[string]*Injector{}
	}
	inj := &Injector{cfg: c, id: sandboxID, ca: ca, creds: map[int]Credential{}, noticed: map[string]bool{}}
	inj.set.Store(&credSet{})
	c.injectors[sandboxID] = inj
	return inj
}

// DropInjector forgets sandboxID's injector (the sandbox is destroyed).
func (c *Config) DropInjector(sandboxID string) {
	c.injMu.Lock()
	defer c.injMu.Unlock()
	delete(c.injectors, sandboxID)
}

func (c *Config) injector(sandboxID string) *Injector {
	c.injMu.Lock()
	defer c.injMu.Unlock()
	return c.injectors[sandboxID]
}

// CA is the injector's certificate authority.
func (inj *Injector) CA() *CA { return inj.ca }

// Add makes creds injected into the sandbox's new requests until remove
// is called. A credential that is not usable (see Credential, ValidHost)
// is left out and logged by name. Safe to call concurrently and while
// connections run.
func (inj *Injector) Add(creds ...Credential) (remove func()) {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	var ids []int
	for _, c := range creds {
		if err := c.validate(); err != nil {
			inj.cfg.Logger.Error("egress credential left out", "sandbox", inj.id, "secret", c.Name, "err", err)
			continue
		}
		c.Hosts = append([]string(nil), c.Hosts...)
		inj.next++
		inj.creds[inj.next] = c
		ids = append(ids, inj.next)
	}
	inj.rebuildLocked()
	return func() {
		inj.mu.Lock()
		defer inj.mu.Unlock()
		for _, id := range ids {
			delete(inj.creds, id)
		}
		inj.rebuildLocked()
	}
}

func (inj *Injector) rebuildLocked() {
	s := &credSet{}
	for _, c := range inj.creds {
		s.creds = append(s.creds, c)
	}
	var rules []rule
	for _, c := range s.creds {
		for _, f := range formPairs(c.Value, c.Placeholder) {
			rules = append(rules, rule{from: []byte(f.value), to: []byte(f.placeholder)})
		}
	}
	s.scrub = newReplacer(rules)
	inj.set.Store(s)
}

// snapshot is the credentials now; nil if none.
func (inj *Injector) snapshot() *credSet {
	if inj == nil {
		return nil
	}
	if s := inj.set.Load(); len(s.creds) > 0 {
		return s
	}
	return nil
}

// notice tells the config's Notice about n, once per (secret, host, kind).
func (inj *Injector) notice(n Notice) {
	key := n.Secret + "\x00" + n.Host + "\x00" + n.Kind
	inj.mu.Lock()
	first := !inj.noticed[key]
	if first && len(inj.noticed) < maxNotices {
		inj.noticed[key] = true
	}
	inj.mu.Unlock()
	if !first {
		return
	}
	inj.cfg.Logger.Info("egress credential notice", "sandbox", inj.id, "secret", n.Secret, "host", n.Host, "kind", n.Kind)
	if inj.cfg.Notice != nil {
		inj.cfg.Notice(inj.id, n)
	}
}

// maxNotices bounds the notices remembered per sandbox (past it, repeats
// may be told again rather than remembered without bound).
const maxNotices = 1024

// credSet is an injector's credentials at one moment.
type credSet struct {
	creds []Credential
	scrub *replacer // every value's forms to its placeholder's (responses)
}

// binds reports whether any credential is bound to name.
func (s *credSet) binds(name string) bool {
	for _, c := range s.creds {
		if hostMatches(c.Hosts, name) {
			return true
		}
	}
	return false
}

// noticeUnbound notices the placeholders in head, the first request head
// of a plain HTTP connection to host, a name no credential is bound to
// (the connection is passed through; later requests on it are not read).
func (s *credSet) noticeUnbound(inj *Injector, host string, head []byte) {
	for _, c := range s.creds {
		if bytes.Contains(head, []byte(c.Placeholder)) {
			inj.notice(Notice{Secret: c.Name, Host: host, Kind: NoticeUnboundHost,
				Message: "a request to " + host + " carried the placeholder of secret " + c.Name + ", which is not bound to that host; it was sent as the placeholder"})
		}
	}
}

// requestRules returns what a request to host, on a connection made to
// connName (the verified name), gets: its header and body replacers.
// Placeholders of credentials not bound to both names, and every
// placeholder when substitute is false (plain HTTP), are left as they
// are and noticed.
func (s *credSet) requestRules(inj *Injector, host, connName string, substitute bool) (headers, body *replacer) {
	var hr, br []rule
	for _, c := range s.creds {
		c := c
		ph := []byte(c.Placeholder)
		switch {
		case !hostMatches(c.Hosts, host) || !hostMatches(c.Hosts, connName):
			n := Notice{Secret: c.Name, Host: host, Kind: NoticeUnboundHost,
				Message: "a request to " + host + " carried the placeholder of secret " + c.Name + ", which is not bound to that host; it was sent as the placeholder"}
			ru := rule{from: ph, to: ph, hit: func() { inj.notice(n) }}
			hr, br = append(hr, ru), append(br, ru)
		case !substitute:
			n := Notice{Secret: c.Name, Host: host, Kind: NoticePlainHTTP,
				Message: "a plain HTTP request to " + host + " carried the placeholder of secret " + c.Name + "; credentials are sent only over HTTPS, so it was sent as the placeholder"}
			ru := rule{from: ph, to: ph, hit: func() { inj.notice(n) }}
			hr, br = append(hr, ru), append(br, ru)
		default:
			ru := rule{from: ph, to: []byte(c.Value)}
			hr = append(hr, ru)
			if c.Body {
				br = append(br, ru)
			} else {
				n := Notice{Secret: c.Name, Host: host, Kind: NoticeBodyNotAllowed,
					Message: "a request body to " + host + " carried the placeholder of secret " + c.Name + ", which is substituted in headers only; it was sent as the placeholder"}
				br = append(br, rule{from: ph, to: ph, hit: func() { inj.notice(n) }})
			}
		}
	}
	return newReplacer(hr), newReplacer(br)
}

// substituteHeaders applies rep to every value of h, and inside the
// base64 credentials of Basic authorization headers.
func substituteHeaders(h http.Header, rep *replacer) {
	if rep.empty() {
		return
	}
	for k, vs := range h {
		basic := k == "Authorization" || k == "Proxy-Authorization"
		for i, v := range vs {
			if basic {
				if scheme, cred, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Basic") {
					if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil {
						if out := rep.replaceString(string(dec)); out != string(dec) {
							v = scheme + " " + base64.StdEncoding.EncodeToString([]byte(out))
						}
					}
				}
			}
			vs[i] = rep.replaceString(v)
		}
	}
}

// scrubHeaders turns every form of a value in h into its placeholder's.
func scrubHeaders(h http.Header, rep *replacer) {
	if rep.empty() {
		return
	}
	for _, vs := range h {
		for i, v := range vs {
			vs[i] = rep.replaceString(v)
		}
	}
}
