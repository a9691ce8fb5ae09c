package worker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/vault"
)

// Egress-bound credentials. A secret bound for egress (vault.Egress)
// never enters a sandbox: the sandbox holds a placeholder
// (network.NewPlaceholder, random per run or per operation), and the
// worker's network stack, which terminates the sandbox's connections,
// puts the value into HTTPS requests to the secret's hosts. For that,
// every sandbox with a network gets its own certificate authority
// (network.CA), which the worker adds to the sandbox's trust stores: the
// image's system bundles (written over in the sandbox's writable root)
// and the variables tools read (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS,
// REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO). Connections to hosts
// no credential is bound to are not intercepted at all.

// caDirGuest is where a sandbox finds its CA certificate (ca.crt) and
// its system bundle with the CA added (bundle.crt), under /opt/helmr.
const caDirGuest = "/opt/helmr/ca"

// systemBundles are where images keep their trusted roots: Debian and
// Ubuntu, Fedora and RHEL, Alpine.
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// sandboxTrust is what a sandbox's CA puts in place: files under
// /opt/helmr/ca (written to the sandbox's helmr dir), the image's system
// bundles with the CA added (written into the sandbox's root once it
// runs) and the environment that points tools at them.
type sandboxTrust struct {
	ca      *network.CA
	inj     *network.Injector
	env     []string
	bundles []sandbox.File
	drop    func()
}

// trustFor makes sandbox id's trust from its CA (nil: a new one) over
// img, writing the CA files into helmrDir; nil when the sandbox has no
// network. release forgets the sandbox's injector.
func (w *Worker) trustFor(id string, img images.Image, env []string, helmrDir string, ca *network.CA) (*sandboxTrust, error) {
	nc := w.cfg.Network
	if !nc.Attaches() {
		return nil, nil
	}
	if ca == nil {
		var err error
		if ca, err = network.NewCA(id); err != nil {
			return nil, fmt.Errorf("the sandbox's certificate authority: %w", err)
		}
	}
	t := &sandboxTrust{ca: ca, inj: nc.Injector(id, ca), drop: func() { nc.DropInjector(id) }}
	files, err := trustFiles(img, env, ca.CertPEM())
	if err != nil {
		t.drop()
		return nil, err
	}
	for name, data := range files.host {
		if err := writeFile(filepath.Join(helmrDir, "ca", name), data); err != nil {
			t.drop()
			return nil, err
		}
	}
	t.env, t.bundles = files.env, files.bundles
	return t, nil
}

type trustSet struct {
	host    map[string][]byte // file name under the CA dir: content
	env     []string
	bundles []sandbox.File
}

// trustFiles works out the trust files of a sandbox of img whose CA
// certificate is caPEM, and the environment naming them (under
// caDirGuest). Without a system bundle in the image only Node's extra
// certificates are set: pointing OpenSSL, Python or git at a bundle
// holding the CA alone would make them distrust every public host.
func trustFiles(img images.Image, env []string, caPEM []byte) (trustSet, error) {
	ts := trustSet{host: map[string][]byte{}}
	ca := append([]byte(nil), caPEM...)
	// An image that sets NODE_EXTRA_CA_CERTS keeps its certificates.
	if p := envValue(env, "NODE_EXTRA_CA_CERTS"); strings.HasPrefix(p, "/") {
		if hp, ok := img.Lookup(p); ok {
			if b, err := os.ReadFile(hp); err == nil {
				ca = append(append(withNewline(b), '\n'), caPEM...)
			}
		}
	}
	ts.host["ca.crt"] = ca
	ts.env = append(ts.env, "NODE_EXTRA_CA_CERTS="+caDirGuest+"/ca.crt")
	var first []byte
	for _, p := range systemBundles {
		hp, ok := img.Lookup(p)
		if !ok {
			continue
		}
		b, err := os.ReadFile(hp)
		if err != nil {
			continue // a dangling link or a directory: not a bundle
		}
		data := append(withNewline(b), caPEM...)
		if first == nil {
			first = data
		}
		ts.bundles = append(ts.bundles, sandbox.File{Path: p, Data: data, Mode: 0o644})
	}
	if first != nil {
		ts.host["bundle.crt"] = first
		b := caDirGuest + "/bundle.crt"
		ts.env = append(ts.env, "SSL_CERT_FILE="+b, "REQUESTS_CA_BUNDLE="+b, "CURL_CA_BUNDLE="+b, "GIT_SSL_CAINFO="+b)
	}
	return ts, nil
}

func withNewline(b []byte) []byte {
	b = append([]byte(nil), b...)
	if len(b) > 0 && !bytes.HasSuffix(b, []byte("\n")) {
		b = append(b, '\n')
	}
	return b
}

// envValue is the value of key in env (KEY=VALUE entries, the last wins).
func envValue(env []string, key string) string {
	v := ""
	for _, e := range env {
		if k, val, ok := strings.Cut(e, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// install writes the system bundles with the CA added into a running
// sandbox's root.
func (t *sandboxTrust) install(ctx context.Context, box sandbox.Sandbox) error {
	if t == nil {
		return nil
	}
	for _, f := range t.bundles {
		if err := box.WriteFile(ctx, f); err != nil {
			return fmt.Errorf("add the sandbox's certificate authority to %s: %w", f.Path, err)
		}
	}
	return nil
}

// add binds creds in the sandbox's network stack until the returned
// func is called.
func (t *sandboxTrust) add(creds []network.Credential) func() {
	if t == nil || len(creds) == 0 {
		return func() {}
	}
	return t.inj.Add(creds...)
}

func (t *sandboxTrust) release() {
	if t != nil && t.drop != nil {
		t.drop()
	}
}

// egressCredential makes the credential that stands for value (one line,
// with an optional line ending) under rule, and returns it with the
// value's line ending: a file holds the placeholder and the ending, an
// environment variable or a ${vault:NAME} the placeholder alone (a
// header cannot carry a newline, so the line is what the value means).
// placeholder, if set, is the one to reuse.
func egressCredential(name string, value []byte, rule *vault.Egress, placeholder string) (network.Credential, string, error) {
	line, ending, ok := vault.SplitLine(value)
	if !ok {
		return network.Credential{}, "", fmt.Errorf("secret %s is bound for egress, so it goes into request headers, and its value is not one line of text: keep multi-line values (keys) in the sandbox (helmr secret set %s --in-sandbox)", name, name)
	}
	if placeholder == "" {
		var err error
		if placeholder, err = network.NewPlaceholder(line); err != nil {
			return network.Credential{}, "", fmt.Errorf("secret %s: %w", name, err)
		}
	}
	c := network.Credential{Name: name, Placeholder: placeholder, Value: line, Hosts: rule.Hosts, Body: rule.Body}
	return c, ending, nil
}

// secretsNote says, for a run's events, how each of its secrets reaches
// the sandbox: egress-bound ones by placeholder, in-sandbox ones as
// values (the weaker mode), and names them in attrs.
func secretsNote(note *runs.SystemData, rs runSecrets) {
	if len(rs.egress) == 0 && len(rs.inSandbox) == 0 {
		return
	}
	var parts []string
	if len(rs.egress) > 0 {
		names := make([]string, 0, len(rs.egress))
		for n, hosts := range rs.egress {
			names = append(names, n+" (to "+strings.Join(hosts, ", ")+")")
		}
		sort.Strings(names)
		parts = append(parts, "egress-bound, a placeholder in the sandbox: "+strings.Join(names, "; "))
		keys := make([]string, 0, len(rs.egress))
		for n := range rs.egress {
			keys = append(keys, n)
		}
		sort.Strings(keys)
		note.Attrs["secretsEgress"] = strings.Join(keys, ",")
	}
	if len(rs.inSandbox) > 0 {
		in := append([]string(nil), rs.inSandbox...)
		sort.Strings(in)
		parts = append(parts, "in the sandbox (weaker: commands there can read the value): "+strings.Join(in, ", "))
		note.Attrs["secretsInSandbox"] = strings.Join(in, ",")
	}
	note.Message += "; secrets " + strings.Join(parts, "; ")
}
