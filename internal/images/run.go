package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/redact"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/vault"
)

// StepRunner runs an image's run steps in a sandbox of the worker's
// isolation tier, never on the host.
type StepRunner interface {
	RunStep(ctx context.Context, req StepRequest) error
}

// StepRequest is one run step to execute.
type StepRequest struct {
	Layers      []string // the image so far, lowest first, read-only
	Upper, Work string   // empty dirs on one filesystem: the step's changes land in Upper
	Argv        []string
	Env         []string // the image's environment so far
	Workdir     string   // absolute; exists in the image or in Upper
	UID, GID    uint32   // the image's user so far
	Caches      []sandbox.Mount
	// Output receives the step's stdout and stderr as they come.
	Output func(stream string, data []byte)
	// Credentials are the step's egress-bound build secrets: its
	// environment and files hold their placeholders, and the step's
	// network stack puts the values into requests to their hosts.
	Credentials []network.Credential
}

// SecretValue is a build secret's value and where it may go: with
// Egress set the value never enters the step's sandbox (a placeholder
// does, see StepRequest.Credentials); nil, it is placed there.
type SecretValue struct {
	Value  []byte
	Egress *vault.Egress
}

// ErrStepFailed is a run step that exited non-zero; the error's message
// names the step and ends with its last lines of output.
var ErrStepFailed = errors.New("image build step failed")

// PrepareOptions are what a build needs beyond the image: where named
// caches live and where step output goes.
type PrepareOptions struct {
	// Scope keeps the named caches of different projects apart
	// (project name).
	Scope string
	// Output, if set, receives each step's output, step numbered from 1.
	Output func(step int, stream string, data []byte)
	// NoCache runs every run step again; the new layers replace the
	// cached ones.
	NoCache bool
	// Secret returns a build secret's value (a vault secret of the
	// build's project environment). Values never enter a layer, the
	// output or a cache key; nil: images with build secrets fail.
	Secret func(ctx context.Context, name string) (SecretValue, error)
	// BaseDigest, if set, is the digest the from step's base must resolve
	// to (the one recorded when the image was built at deploy): a registry
	// base is pulled by it rather than by its tag, so a moved tag changes
	// nothing; a built-in or OCI layout base that differs is an error.
	BaseDigest string
}

var cacheNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// stepLocks serialises builds of the same step in one process.
var stepLocks sync.Map // layer dir → *sync.Mutex

// runLayer returns the layer of run step s (number n) on top of img: the
// cached one for key, or the step's changes after running it.
func (r *Resolver) runLayer(ctx context.Context, key string, n int, img Image, s deployments.Step, opts PrepareOptions, ran *int) (string, error) {
	dir := filepath.Join(r.LayersDir, "run-"+key)
	mu, _ := stepLocks.LoadOrStore(dir, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	say := func(format string, args ...any) {
		if opts.Output != nil {
			opts.Output(n, "build", []byte(fmt.Sprintf(format, args...)+"\n"))
		}
	}
	_, statErr := os.Stat(dir)
	if statErr == nil && !opts.NoCache {
		say("step %d: run %s (cached)", n, quoteArgv(s.Argv))
		return dir, nil
	}
	if r.Runner == nil {
		return "", errors.New("this worker cannot run build steps (no sandbox tier that writes image layers: run steps need the gvisor tier)")
	}
	if len(s.Argv) == 0 {
		return "", errors.New("run step with an empty argv")
	}
	uid, gid, home, err := img.ResolveUser()
	if err != nil {
		return "", err
	}
	var caches []sandbox.Mount
	for _, c := range s.Cache {
		if !cacheNamePattern.MatchString(c.Cache) || !cacheNamePattern.MatchString(opts.Scope) {
			return "", fmt.Errorf("cache %q (scope %q): names must match %s", c.Cache, opts.Scope, cacheNamePattern)
		}
		host := filepath.Join(r.CachesDir, opts.Scope, c.Cache)
		if err := os.MkdirAll(host, 0o755); err != nil {
			return "", fmt.Errorf("cache %s: %w", c.Cache, err)
		}
		// The step's user owns a fresh cache, so an unprivileged step can fill it.
		if err := os.Chown(host, int(uid), int(gid)); err != nil {
			return "", fmt.Errorf("cache %s: %w", c.Cache, err)
		}
		caches = append(caches, sandbox.Mount{Source: host, Dest: c.MountPath})
	}
	if err := os.MkdirAll(r.LayersDir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(r.LayersDir, ".build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	upper, work := filepath.Join(tmp, "upper"), filepath.Join(tmp, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
	}
	workdir := img.Workdir
	if workdir == "" {
		workdir = "/"
	}
	// As Dockerfile's WORKDIR: a workdir the image lacks is made, in
	// the step's layer, owned by the step's user.
	if _, ok := img.Lookup(workdir); !ok {
		if err := layerDirs(upper, img, workdir, uid, gid); err != nil {
			return "", fmt.Errorf("workdir %s: %w", workdir, err)
		}
	}
	env := append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home}, img.Env...)
	var values [][]byte
	var creds []network.Credential
	if len(s.Secrets) > 0 {
		if opts.Secret == nil {
			return "", errors.New("the step uses build secrets and this build has no vault")
		}
		secretDir, err := os.MkdirTemp("", "helmr-build-secrets-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(secretDir)
		if err := os.Chmod(secretDir, 0o755); err != nil {
			return "", err
		}
		names := make([]string, 0, len(s.Secrets))
		for name := range s.Secrets {
			names = append(names, name)
		}
		sort.Strings(names)
		mountDir := false
		for _, name := range names {
			sv, err := opts.Secret(ctx, name)
			if err != nil {
				return "", fmt.Errorf("build secret %s: %w", name, err)
			}
			v := sv.Value
			values = append(values, v)
			if sv.Egress != nil {
				line, ending, ok := vault.SplitLine(v)
				if !ok {
					return "", fmt.Errorf("build secret %s is bound for egress, so it goes into request headers, and its value is not one line of text", name)
				}
				ph, err := network.NewPlaceholder(line)
				if err != nil {
					return "", fmt.Errorf("build secret %s: %w", name, err)
				}
				creds = append(creds, network.Credential{Name: name, Placeholder: ph, Value: line, Hosts: sv.Egress.Hosts, Body: sv.Egress.Body})
				v = []byte(ph + ending) // a file keeps the line ending
				if s.Secrets[name].Env != "" {
					v = []byte(ph)
				}
			}
			if bs := s.Secrets[name]; bs.Env != "" {
				env = append(env, bs.Env+"="+string(v))
			} else {
				f := filepath.Join(secretDir, filepath.Base(bs.File))
				if err := os.WriteFile(f, v, 0o400); err != nil {
					return "", err
				}
				if err := os.Chown(f, int(uid), int(gid)); err != nil {
					return "", err
				}
				mountDir = true
			}
		}
		if mountDir {
			caches = append(caches, sandbox.Mount{Source: secretDir, Dest: "/run/secrets", ReadOnly: true})
		}
	}
	say("step %d: run %s", n, quoteArgv(s.Argv))
	unpin := r.pin(img.Layers)
	defer unpin()
	tail := &tailBuffer{max: 20}
	// With build secrets, output is passed on a line at a time, each line
	// scrubbed of the values, their encoded forms (redact.Forms) and each
	// line of a multi-line value.
	var scrubbed [][]byte
	for _, v := range values {
		for _, f := range redact.Forms(string(v)) { // the value and its encodings
			scrubbed = append(scrubbed, []byte(f))
		}
		for _, line := range bytes.Split(v, []byte("\n")) {
			if len(bytes.TrimSpace(line)) >= 4 && len(line) < len(v) {
				scrubbed = append(scrubbed, line)
			}
		}
	}
	sort.Slice(scrubbed, func(i, j int) bool { return len(scrubbed[i]) > len(scrubbed[j]) })
	partial := map[string][]byte{}
	emit := func(stream string, data []byte) {
		for _, v := range scrubbed {
			data = bytes.ReplaceAll(data, v, []byte("[redacted build secret]"))
		}
		tail.Write(data)
		if opts.Output != nil {
			opts.Output(n, stream, data)
		}
	}
	forward := func(stream string, data []byte) {
		if len(scrubbed) == 0 {
			emit(stream, data)
			return
		}
		buf := append(partial[stream], data...)
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			emit(stream, buf[:i+1])
			buf = buf[i+1:]
		}
		partial[stream] = append([]byte(nil), buf...)
	}
	flush := func() {
		for stream, rest := range partial {
			if len(rest) > 0 {
				emit(stream, rest)
			}
			delete(partial, stream)
		}
	}
	err = r.Runner.RunStep(ctx, StepRequest{
		Layers: img.Layers, Upper: upper, Work: work, Argv: s.Argv, Env: env,
		Workdir: workdir, UID: uid, GID: gid, Caches: caches,
		Output: forward, Credentials: creds,
	})
	flush()
	if err != nil {
		if errors.Is(err, ErrStepFailed) {
			return "", fmt.Errorf("%w; its last output:\n%s", err, tail.String())
		}
		return "", err
	}
	if statErr == nil {
		// --no-cache: the old layer moves aside (sandboxes may still have
		// it mounted; removing it is the collector's job) for the new one.
		if err := os.Rename(dir, filepath.Join(r.LayersDir, ".replaced-"+filepath.Base(tmp))); err != nil {
			return "", fmt.Errorf("replace the cached layer: %w", err)
		}
		r.forgetSize(filepath.Base(dir))
	}
	if err := os.Rename(upper, dir); err != nil {
		return "", fmt.Errorf("keep the step's layer: %w", err)
	}
	*ran++
	return dir, nil
}

// layerDirs creates image directory dir, with its parents, in layer (a
// layer being built over img): those img already has with img's mode and
// owner, as overlayfs shows them, the others 0755 owned by uid:gid.
// Components the layer already holds are left as they are.
func layerDirs(layer string, img Image, dir string, uid, gid uint32) error {
	cur := "/"
	for _, part := range strings.Split(strings.Trim(path.Clean(dir), "/"), "/") {
		if part == "" {
			continue
		}
		cur = path.Join(cur, part)
		dst := filepath.Join(layer, filepath.FromSlash(cur))
		if _, err := os.Lstat(dst); err == nil {
			continue
		}
		mode, u, g := os.FileMode(0o755), int(uid), int(gid)
		if p, ok := img.Lookup(cur); ok {
			fi, err := os.Stat(p)
			if err != nil || !fi.IsDir() {
				return fmt.Errorf("%s is not a directory in the image", cur)
			}
			st := fi.Sys().(*syscall.Stat_t)
			mode, u, g = fi.Mode().Perm(), int(st.Uid), int(st.Gid)
		}
		if err := os.Mkdir(dst, mode); err != nil {
			return err
		}
		if err := os.Chown(dst, u, g); err != nil {
			return err
		}
		if err := os.Chmod(dst, mode); err != nil {
			return err
		}
	}
	return nil
}

// tailBuffer keeps the last max lines written to it.
type tailBuffer struct {
	max     int
	lines   []string
	partial string
}

func (t *tailBuffer) Write(p []byte) {
	parts := strings.Split(t.partial+string(p), "\n")
	t.partial = parts[len(parts)-1]
	t.lines = append(t.lines, parts[:len(parts)-1]...)
	if len(t.lines) > t.max {
		t.lines = t.lines[len(t.lines)-t.max:]
	}
}

func (t *tailBuffer) String() string {
	out := append([]string(nil), t.lines...)
	if t.partial != "" {
		out = append(out, t.partial)
	}
	return strings.Join(out, "\n")
}
