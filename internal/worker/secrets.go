package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/redact"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
)

// runSecrets are a run's bound secrets as the worker uses them: the
// environment they add to the task process, and the redactor that keeps
// their values out of everything the run reports.
type runSecrets struct {
	env    map[string]string
	files  []placedSecret
	redact *redactor
	// creds are the egress-bound secrets (each file of a directory
	// secret its own, named NAME/FILE), bound in the sandbox's network
	// stack while the run holds it; egress names their hosts by secret,
	// inSandbox the secrets placed as values.
	creds     []network.Credential
	egress    map[string][]string
	inSandbox []string
}

// placeholders returns each credential's placeholder by name, as a
// parked run's checkpoint keeps them.
func (rs runSecrets) placeholders() map[string]string {
	out := map[string]string{}
	for _, c := range rs.creds {
		out[c.Name] = c.Placeholder
	}
	return out
}

// keep makes the credentials use the placeholders a restored sandbox
// holds (saved at park).
func (rs runSecrets) keep(saved map[string]string) error {
	for i, c := range rs.creds {
		p, ok := saved[c.Name]
		if !ok {
			return fmt.Errorf("the checkpoint holds no placeholder of secret %s", c.Name)
		}
		rs.creds[i].Placeholder = p
	}
	return nil
}

// placedSecret is a file or directory a run's secret fills.
type placedSecret struct {
	name string
	file sandbox.File
}

// secretsFor fetches the values of l's bound secrets and works out where
// each goes as the task declares: an environment variable, or a file or a
// directory of files (placed by the sandbox before the task starts, owned
// by the declared owner, default the run's user, and checked readable by
// the run's user).
func (w *Worker) secretsFor(ctx context.Context, l Lease, p prepared) (runSecrets, error) {
	rs := runSecrets{env: map[string]string{}, redact: &redactor{}, egress: map[string][]string{}}
	if len(l.Task.Secrets) == 0 {
		return rs, nil
	}
	vals, err := w.cfg.Control.RunSecrets(ctx, l.Run.ID)
	if err != nil {
		return rs, fmt.Errorf("fetch the run's secrets: %w", err)
	}
	names := make([]string, 0, len(l.Task.Secrets))
	for n := range l.Task.Secrets {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		target := l.Task.Secrets[name]
		v, ok := vals[name]
		if !ok {
			return rs, fmt.Errorf("secret %s is declared by the task but the run does not bind it", name)
		}
		rs.redact.add(name, v.Value)
		if v.Egress == nil {
			rs.inSandbox = append(rs.inSandbox, name)
		} else {
			rs.egress[name] = v.Egress.Hosts
		}
		if target.Env != "" {
			value := string(v.Value)
			if v.Egress != nil {
				c, _, err := egressCredential(name, v.Value, v.Egress, "")
				if err != nil {
					return rs, err
				}
				rs.creds, value = append(rs.creds, c), c.Placeholder
			}
			rs.env[target.Env] = value
			continue
		}
		placed, err := placeSecret(name, target, v.Value, p)
		if err != nil {
			return rs, fmt.Errorf("secret %s: %w", name, err)
		}
		for i, f := range placed {
			if f.file.Dir {
				continue
			}
			rs.redact.add(name, f.file.Data)
			if v.Egress != nil {
				cname := name
				if target.Directory != "" {
					cname = name + "/" + path.Base(f.file.Path)
				}
				c, ending, err := egressCredential(cname, f.file.Data, v.Egress, "")
				if err != nil {
					return rs, err
				}
				rs.creds = append(rs.creds, c)
				placed[i].file.Data = []byte(c.Placeholder + ending)
			}
		}
		rs.files = append(rs.files, placed...)
	}
	return rs, nil
}

// placeSecret turns a file or directory secret into what the sandbox
// writes. A directory secret's value is a JSON object of file name to
// content holding every file the task lists.
func placeSecret(name string, t deployments.SecretTarget, v []byte, p prepared) ([]placedSecret, error) {
	reader := &[2]uint32{p.spec.UID, p.spec.GID}
	uid, gid := p.spec.UID, p.spec.GID
	if t.Owner != "" {
		var err error
		if uid, gid, _, err = (images.Image{Layers: p.img.Layers, User: t.Owner}).ResolveUser(); err != nil {
			return nil, fmt.Errorf("owner: %w", err)
		}
	}
	mode := uint32(0o400)
	if t.Mode != "" {
		var err error
		if mode, err = deployments.ParseFileMode(t.Mode); err != nil {
			return nil, err
		}
	}
	at := t.File
	if at == "" {
		at = t.Directory
	}
	if !path.IsAbs(at) || path.Clean(at) != at || at == "/" {
		return nil, fmt.Errorf("path %q is not clean and absolute", at)
	}
	if why := deployments.SecretPathProblem(at); why != "" {
		return nil, fmt.Errorf("path %s: %s", at, why)
	}
	if t.File != "" {
		return []placedSecret{{name, sandbox.File{Path: at, Data: v, Mode: mode, UID: uid, GID: gid, Reader: reader}}}, nil
	}
	var files map[string]string
	if err := json.Unmarshal(v, &files); err != nil {
		return nil, fmt.Errorf("a directory secret's value is a JSON object of file name to content (helmr secret set %s < files.json)", name)
	}
	// The directory may be entered and listed where its files may be read.
	dirMode := mode | (mode&0o444)>>2
	out := []placedSecret{{name, sandbox.File{Path: at, Dir: true, Mode: dirMode, UID: uid, GID: gid, Reader: reader}}}
	for _, f := range t.Files {
		content, ok := files[f]
		if !ok {
			return nil, fmt.Errorf("its value has no file %q (the task declares %v)", f, t.Files)
		}
		out = append(out, placedSecret{name, sandbox.File{Path: path.Join(at, f), Data: []byte(content), Mode: mode, UID: uid, GID: gid, Reader: reader}})
	}
	return out, nil
}

// redactor replaces secret values, and their encoded forms (see
// redact.Forms), with "[redacted:NAME]". A value that spans lines is
// also replaced line by line (lines of 4 bytes or more), since logs are
// stored a line at a time.
type redactor struct {
	pairs []redaction // longest first
}

type redaction struct {
	value, name string
}

func (r *redactor) add(name string, v []byte) {
	if len(v) == 0 {
		return
	}
	// The value, and its encodings (inside JSON strings, base64, ...).
	for _, f := range redact.Forms(string(v)) {
		r.pairs = append(r.pairs, redaction{f, name})
	}
	if strings.Contains(string(v), "\n") {
		for _, line := range strings.Split(string(v), "\n") {
			if line = strings.TrimRight(line, "\r"); len(line) >= 4 {
				r.pairs = append(r.pairs, redaction{line, name})
			}
		}
	}
	sort.SliceStable(r.pairs, func(i, j int) bool { return len(r.pairs[i].value) > len(r.pairs[j].value) })
}

// String returns s with every secret value replaced.
func (r *redactor) String(s string) string {
	if r == nil {
		return s
	}
	for _, p := range r.pairs {
		if strings.Contains(s, p.value) {
			s = strings.ReplaceAll(s, p.value, "[redacted:"+p.name+"]")
		}
	}
	return s
}

// JSON redacts a JSON document; if a value sat outside a string (a
// number, say) the result is the redacted text as a JSON string.
func (r *redactor) JSON(doc json.RawMessage) json.RawMessage {
	if r == nil || len(r.pairs) == 0 || len(doc) == 0 {
		return doc
	}
	out := r.String(string(doc))
	if out == string(doc) {
		return doc
	}
	if json.Valid([]byte(out)) {
		return json.RawMessage(out)
	}
	q, _ := json.Marshal(out)
	return q
}

// Outcome redacts everything an outcome reports.
func (r *redactor) Outcome(o *runs.Outcome) *runs.Outcome {
	if r == nil || o == nil || len(r.pairs) == 0 {
		return o
	}
	o.Output = r.JSON(o.Output)
	if o.Error != nil {
		e := *o.Error
		e.Message, e.Stack = r.String(e.Message), r.String(e.Stack)
		o.Error = &e
	}
	for i := range o.Notes {
		o.Notes[i].Message = r.String(o.Notes[i].Message)
	}
	return o
}
