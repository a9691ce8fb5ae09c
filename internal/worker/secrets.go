package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/helmr/helmr/internal/runs"
)

// runSecrets are a run's bound secrets as the worker uses them: the
// environment they add to the task process, and the redactor that keeps
// their values out of everything the run reports.
type runSecrets struct {
	env    map[string]string
	redact *redactor
}

// secretsFor fetches the values of l's bound secrets and places them as
// the task declares. File and directory placements are not materialized
// by this version: such a run fails before it starts, saying so.
func (w *Worker) secretsFor(ctx context.Context, l Lease) (runSecrets, error) {
	rs := runSecrets{env: map[string]string{}, redact: &redactor{}}
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
		rs.redact.add(name, v)
		switch {
		case target.Env != "":
			rs.env[target.Env] = string(v)
		default:
			return rs, fmt.Errorf("secret %s: file and directory secrets are not materialized yet; declare it as { env: \"...\" }", name)
		}
	}
	return rs, nil
}

// redactor replaces secret values with "[redacted:NAME]". A value that
// spans lines is also replaced line by line (lines of 4 bytes or more),
// since logs are stored a line at a time.
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
	r.pairs = append(r.pairs, redaction{string(v), name})
	if q, _ := json.Marshal(string(v)); len(q) > 2 && !bytes.Equal(q[1:len(q)-1], v) {
		r.pairs = append(r.pairs, redaction{string(q[1 : len(q)-1]), name}) // as it appears inside JSON strings
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
