package workspaces

import (
	"context"
	"encoding/base64"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/redact"
	"github.com/helmr/helmr/internal/vault"
)

// Limits of one exec.
const (
	DefaultExecTimeout = 60      // seconds
	MaxExecTimeout     = 3600    // seconds
	MaxOutputBytes     = 1 << 20 // per stream; the rest is cut, with a marker
	MaxStdinBytes      = 1 << 20
)

// ExecRequest runs one command in a workspace: Argv as is, or Command
// through /bin/sh -c. Cwd is relative to the workspace (default: the
// workspace itself) or an absolute path inside it.
type ExecRequest struct {
	Argv           []string          `json:"argv,omitempty"`
	Command        string            `json:"command,omitempty"`
	Cwd            string            `json:"cwd,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Stdin          string            `json:"stdin,omitempty"`
	TimeoutSeconds float64           `json:"timeoutSeconds,omitempty"`
	// OutputEncoding is how the result carries stdout and stderr:
	// EncodingText (the default: UTF-8, each invalid byte becoming
	// U+FFFD) or EncodingBase64 (the raw bytes, base64).
	OutputEncoding string `json:"outputEncoding,omitempty"`
}

// Output encodings of an exec result (ExecRequest.OutputEncoding).
const (
	EncodingText   = "text"
	EncodingBase64 = "base64"
)

// ExecResult is how the command ended and what it printed.
type ExecResult struct {
	ExitCode        int     `json:"exitCode"`
	Signal          string  `json:"signal,omitempty"`
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	StdoutTruncated bool    `json:"stdoutTruncated,omitempty"`
	StderrTruncated bool    `json:"stderrTruncated,omitempty"`
	TimedOut        bool    `json:"timedOut,omitempty"`
	DurationMs      float64 `json:"durationMs"`
	// OutputEncoding is EncodingBase64 when Stdout and Stderr are base64
	// of the bytes printed (see Encode); empty: text.
	OutputEncoding string `json:"outputEncoding,omitempty"`
}

// Validate refuses a request that cannot run (errdefs.ErrInvalid): argv
// xor command, a cwd leaving the workspace, bad env names, limits.
func (req ExecRequest) Validate() error {
	if len(req.Stdin) > MaxStdinBytes {
		return errdefs.Invalidf("stdin is more than %d bytes", MaxStdinBytes)
	}
	switch {
	case len(req.Argv) == 0 && req.Command == "":
		return errdefs.Invalidf("give argv (a list) or command (a shell string)")
	case len(req.Argv) > 0 && req.Command != "":
		return errdefs.Invalidf("give argv or command, not both")
	case len(req.Argv) > 0 && req.Argv[0] == "":
		return errdefs.Invalidf("argv[0] is empty")
	case req.TimeoutSeconds < 0 || req.TimeoutSeconds > MaxExecTimeout:
		return errdefs.Invalidf("timeoutSeconds must be 0 (the default, %ds) to %d", DefaultExecTimeout, MaxExecTimeout)
	case strings.ContainsRune(req.Cwd, 0):
		return errdefs.Invalidf("cwd holds a NUL byte")
	case req.OutputEncoding != "" && req.OutputEncoding != EncodingText && req.OutputEncoding != EncodingBase64:
		return errdefs.Invalidf("outputEncoding %q: give %q (the default) or %q", req.OutputEncoding, EncodingText, EncodingBase64)
	}
	if c := path.Clean(req.Cwd); req.Cwd != "" && (path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../")) {
		return errdefs.Invalidf("cwd %q must be relative to the workspace and stay inside it", req.Cwd)
	}
	for k := range req.Env {
		if !ValidEnvName(k) {
			return errdefs.Invalidf("env name %q is not a valid variable name", k)
		}
	}
	return nil
}

// Timeout is how long the command may run: TimeoutSeconds, or
// DefaultExecTimeout when it is 0.
func (req ExecRequest) Timeout() time.Duration {
	if t := time.Duration(req.TimeoutSeconds * float64(time.Second)); t > 0 {
		return t
	}
	return DefaultExecTimeout * time.Second
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidEnvName reports whether name is a valid environment variable name.
func ValidEnvName(name string) bool { return envName.MatchString(name) }

// vaultRef is a credential placeholder in an exec request: ${vault:NAME}
// stands for the value of the vault secret NAME of the workspace's
// project environment, put in by the worker for that exec only.
var vaultRef = regexp.MustCompile(`\$\{vault:([A-Za-z_][A-Za-z0-9_]*)\}`)

// VaultNames lists the vault secrets req refers to, sorted.
func (req ExecRequest) VaultNames() []string {
	seen := map[string]bool{}
	scan := func(s string) {
		for _, m := range vaultRef.FindAllStringSubmatch(s, -1) {
			seen[m[1]] = true
		}
	}
	for _, a := range req.Argv {
		scan(a)
	}
	scan(req.Command)
	scan(req.Stdin)
	for _, v := range req.Env {
		scan(v)
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Revealer returns the value of a vault secret of a project environment,
// with its egress rule.
type Revealer interface {
	Open(ctx context.Context, project, env, name string) (vault.Value, error)
}

// SecretError is a vault reference SecretsFor could not fill in.
type SecretError struct {
	Name string
	Err  error
}

func (e *SecretError) Error() string { return "${vault:" + e.Name + "}: " + e.Err.Error() }
func (e *SecretError) Unwrap() error { return e.Err }

// SecretsFor returns the values of the vault secrets req refers to, from
// the workspace's project environment, and the egress rules of those
// bound for egress (whose values the worker keeps out of the sandbox);
// an error names the reference.
func SecretsFor(ctx context.Context, v Revealer, ws Workspace, req ExecRequest) (map[string]string, map[string]*vault.Egress, error) {
	names := req.VaultNames()
	if len(names) == 0 {
		return nil, nil, nil
	}
	out := make(map[string]string, len(names))
	var egress map[string]*vault.Egress
	for _, n := range names {
		val, err := v.Open(ctx, ws.Project, ws.Env, n)
		if err != nil {
			return nil, nil, &SecretError{Name: n, Err: err}
		}
		out[n] = string(val.Bytes)
		if val.Egress != nil {
			if _, _, ok := vault.SplitLine(val.Bytes); !ok {
				return nil, nil, &SecretError{Name: n, Err: fmt.Errorf("bound for egress, and its value is not one line of text: %w", errdefs.ErrInvalid)}
			}
			if egress == nil {
				egress = map[string]*vault.Egress{}
			}
			egress[n] = val.Egress
		}
	}
	return out, egress, nil
}

// WithSecrets returns req with every ${vault:NAME} replaced by its value.
func (req ExecRequest) WithSecrets(values map[string]string) ExecRequest {
	if len(values) == 0 {
		return req
	}
	put := func(s string) string {
		return vaultRef.ReplaceAllStringFunc(s, func(m string) string {
			if v, ok := values[vaultRef.FindStringSubmatch(m)[1]]; ok {
				return v
			}
			return m
		})
	}
	out := req
	out.Argv = make([]string, len(req.Argv))
	for i, a := range req.Argv {
		out.Argv[i] = put(a)
	}
	out.Command, out.Stdin = put(req.Command), put(req.Stdin)
	if req.Env != nil {
		out.Env = map[string]string{}
		for k, v := range req.Env {
			out.Env[k] = put(v)
		}
	}
	return out
}

// Redact replaces every value of values in s, and its encoded forms
// (redact.Forms: JSON-escaped, percent-encoded, hex, base64), with
// [redacted:NAME], longest first.
func Redact(s string, values map[string]string) string {
	if len(values) == 0 {
		return s
	}
	return redact.New(values).Replace(s, Marker)
}

// Marker is what stands for the secret name in redacted text.
func Marker(name string) string { return "[redacted:" + name + "]" }

// SafeCut returns where to cut s, at most at limit, so that no occurrence
// of a value in values (or of a form of one) is split, which would leave
// a prefix of it that Redact cannot recognise: limit, or the start of an
// occurrence that straddles it.
func SafeCut(s string, limit int, values map[string]string) int {
	if limit >= len(s) || len(values) == 0 {
		return min(limit, len(s))
	}
	return redact.New(values).SafeCut(s, limit)
}

// Lookahead is how many bytes past a cut SafeCut needs to see to know
// that no value straddles it: the longest form's length less one.
func Lookahead(values map[string]string) int {
	if len(values) == 0 {
		return 0
	}
	return redact.New(values).Lookahead()
}

// Redact returns the result with every secret value replaced; a base64
// result is redacted in the bytes it encodes (and encoded again).
func (r ExecResult) Redact(values map[string]string) ExecResult {
	if len(values) == 0 {
		return r
	}
	if r.OutputEncoding != EncodingBase64 {
		r.Stdout, r.Stderr = Redact(r.Stdout, values), Redact(r.Stderr, values)
		return r
	}
	for _, out := range []*string{&r.Stdout, &r.Stderr} {
		raw, err := base64.StdEncoding.DecodeString(*out)
		if err != nil {
			*out = "" // not what a worker sends: drop it rather than pass it on unredacted
			continue
		}
		*out = base64.StdEncoding.EncodeToString([]byte(Redact(string(raw), values)))
	}
	return r
}

// Encode returns the result with its output in encoding (as
// ExecRequest.OutputEncoding): for EncodingBase64, Stdout and Stderr
// become base64 of their bytes, which a worker does before the result
// leaves it, as JSON would turn invalid UTF-8 into U+FFFD. A cut stream
// keeps its marker line, encoded with the bytes.
func (r ExecResult) Encode(encoding string) ExecResult {
	if encoding != EncodingBase64 || r.OutputEncoding == EncodingBase64 {
		return r
	}
	r.Stdout = base64.StdEncoding.EncodeToString([]byte(r.Stdout))
	r.Stderr = base64.StdEncoding.EncodeToString([]byte(r.Stderr))
	r.OutputEncoding = EncodingBase64
	return r
}
