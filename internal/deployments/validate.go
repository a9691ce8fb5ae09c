package deployments

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/sandbox"
)

// FieldError is one validation problem, naming the task and field.
type FieldError struct {
	Task    string `json:"task,omitempty"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

func (e FieldError) String() string {
	if e.Task == "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Message)
	}
	return fmt.Sprintf("task %q: %s: %s", e.Task, e.Field, e.Message)
}

// ValidationError lists every problem found in a manifest. It wraps errdefs.ErrInvalid.
type ValidationError struct{ Problems []FieldError }

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return "invalid deployment: " + strings.Join(parts, "; ")
}

// Unwrap makes errors.Is(err, errdefs.ErrInvalid) hold.
func (e *ValidationError) Unwrap() error { return errdefs.ErrInvalid }

var (
	idPattern      = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)
	memoryPattern  = regexp.MustCompile(`^([0-9]+)(Ki|Mi|Gi|Ti|K|M|G|T)?$`)
	envNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate checks a manifest; files holds the deployment's paths so task
// modules and copy sources can be checked (nil skips those checks).
func (m Manifest) Validate(files map[string][]byte) error {
	var ps []FieldError
	add := func(task, field, format string, args ...any) {
		ps = append(ps, FieldError{Task: task, Field: field, Message: fmt.Sprintf(format, args...)})
	}
	if !idPattern.MatchString(m.Project) {
		add("", "project", "must be 1-128 letters, digits, '.', '_' or '-', got %q", m.Project)
	}
	for p := range files {
		if !ValidFilePath(p) {
			add("", "files", "path %q must be a clean relative path under bundles/ or context/", p)
		}
	}
	if len(m.Tasks) == 0 {
		add("", "tasks", "the project defines no tasks (export task(...) from a module under the config's dirs)")
	}
	seen := map[string]string{}
	sandboxes := map[string]TaskManifest{} // by name: the first task declaring it
	queues := map[string]TaskManifest{}
	for _, t := range m.Tasks {
		if !idPattern.MatchString(t.ID) {
			add(t.ID, "id", "must be 1-128 letters, digits, '.', '_' or '-'")
		}
		where := t.Module + "#" + t.Export
		if prev, dup := seen[t.ID]; dup {
			add(t.ID, "id", "duplicate task id (defined by %s and %s)", prev, where)
		}
		seen[t.ID] = where
		if !t.HasRun {
			add(t.ID, "run", "missing: a task needs a run function")
		}
		if files != nil {
			if _, ok := files[t.Module]; !ok {
				add(t.ID, "module", "bundle %q is not part of the deployment", t.Module)
			}
		}
		if t.MaxDuration < 0 || t.MaxDuration > 7*24*3600 {
			add(t.ID, "maxDuration", "must be between 1 and 604800 seconds, got %d", t.MaxDuration)
		}
		validateSecrets(t, add)
		if len(t.Input) > 0 {
			if _, err := CompileInput(t.Input); err != nil {
				add(t.ID, "input", "%v", err)
			}
		}
		validateSandbox(t, files, add)
		if t.Retry != nil {
			if err := t.Retry.Validate(); err != nil {
				add(t.ID, "retry", "%v", err)
			}
		}
		if q := t.Queue; q != nil {
			switch {
			case !ValidQueueName(q.Name):
				add(t.ID, "queue.name", "%q: 1 to 128 letters, digits and _.:/- (starting with a letter or digit)", q.Name)
			case q.ConcurrencyLimit < 0 || q.ConcurrencyLimit > MaxConcurrencyLimit:
				add(t.ID, "queue.concurrencyLimit", "is 0 (no limit) to %d, got %d", MaxConcurrencyLimit, q.ConcurrencyLimit)
			}
			if first, ok := queues[q.Name]; !ok {
				queues[q.Name] = t
			} else if first.Queue.ConcurrencyLimit != q.ConcurrencyLimit {
				add(t.ID, "queue", "queue %q is declared with concurrencyLimit %d here and %d by task %s (declare it once with queue() and share it)", q.Name, q.ConcurrencyLimit, first.Queue.ConcurrencyLimit, first.ID)
			}
		}
		if sb := t.Sandbox; sb != nil {
			if first, ok := sandboxes[sb.Name]; !ok {
				sandboxes[sb.Name] = t
			} else if !sameSandbox(first.Sandbox, sb) {
				add(t.ID, "sandbox.name", "sandbox %q is declared again with other settings than task %s's (a sandbox's name names one sandbox: rename one of them)", sb.Name, first.ID)
			}
		}
	}
	if len(ps) > 0 {
		return &ValidationError{Problems: ps}
	}
	return nil
}

type addFunc func(task, field, format string, args ...any)

func validateSecrets(t TaskManifest, add addFunc) {
	for name, s := range t.Secrets {
		field := "secrets." + name
		if !envNamePattern.MatchString(name) {
			add(t.ID, field, "secret names are letters, digits and '_'")
		}
		n := 0
		for _, v := range []string{s.Env, s.File, s.Directory} {
			if v != "" {
				n++
			}
		}
		if n != 1 {
			add(t.ID, field, "declare exactly one of env, file or directory")
			continue
		}
		if s.Env != "" && !envNamePattern.MatchString(s.Env) {
			add(t.ID, field+".env", "%q is not a valid environment variable name", s.Env)
		}
		for _, p := range []string{s.File, s.Directory} {
			if p == "" {
				continue
			}
			if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
				add(t.ID, field, "path %q must be absolute and clean", p)
			} else if why := SecretPathProblem(p); why != "" {
				add(t.ID, field, "path %q: %s", p, why)
			}
		}
		if s.Mode != "" {
			if _, err := ParseFileMode(s.Mode); err != nil {
				add(t.ID, field+".mode", "%v", err)
			}
		}
		if s.Owner != "" && !ownerPattern.MatchString(s.Owner) {
			add(t.ID, field+".owner", "%q: want user, user:group or uid:gid", s.Owner)
		}
		if s.Directory != "" && len(s.Files) == 0 {
			add(t.ID, field+".files", "a directory secret lists the files it holds")
		}
		for _, f := range s.Files {
			if f == "" || strings.ContainsAny(f, "/\\") || f == "." || f == ".." {
				add(t.ID, field+".files", "%q is not a file name", f)
			}
		}
		if s.Egress != nil {
			if _, err := s.Egress.Normalize(); err != nil {
				add(t.ID, field+".egress", "%v", err)
			}
		}
	}
}

// SecretPathProblem says why a secret may not be placed at p (clean and
// absolute), or "": never in the kernel's and Helmr's own trees.
func SecretPathProblem(p string) string {
	for _, r := range []string{"/proc", "/sys", "/dev", "/opt/helmr"} {
		if p == r || strings.HasPrefix(p, r+"/") {
			if strings.HasPrefix(p, "/dev/shm/") {
				return ""
			}
			return "under " + r + ", which the runtime owns"
		}
	}
	return ""
}

// ParseFileMode reads a permission mode written in octal ("0400", "400").
func ParseFileMode(s string) (uint32, error) {
	n, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0"), 8, 32)
	if s == "0" || s == "00" {
		n, err = 0, nil
	}
	if err != nil || n > 0o7777 {
		return 0, fmt.Errorf("mode %q is not an octal file mode such as 0400", s)
	}
	return uint32(n), nil
}

func validateSandbox(t TaskManifest, files map[string][]byte, add addFunc) {
	sb := t.Sandbox
	if sb == nil {
		add(t.ID, "sandbox", "missing: every task references a sandbox")
		return
	}
	if !idPattern.MatchString(sb.Name) {
		add(t.ID, "sandbox.name", "must be 1-128 letters, digits, '.', '_' or '-', got %q", sb.Name)
	}
	ws := sb.Workspace
	switch {
	case ws == "":
	case !path.IsAbs(ws) || path.Clean(ws) != ws:
		add(t.ID, "sandbox.workspace", "must be an absolute, clean path, got %q", ws)
	case sandbox.IsReserved(ws):
		add(t.ID, "sandbox.workspace", "%q is reserved by the runtime (%s)", ws, strings.Join(sandbox.ReservedPaths, ", "))
	}
	if c := sb.Resources.CPU; c < 0 || c > 256 {
		add(t.ID, "sandbox.resources.cpu", "must be between 0 and 256 vCPUs, got %v", c)
	}
	if m := sb.Resources.Memory; m != "" {
		if b, err := ParseMemory(m); err != nil {
			add(t.ID, "sandbox.resources.memory", "%v", err)
		} else if b < 64<<20 {
			add(t.ID, "sandbox.resources.memory", "must be at least 64Mi, got %q", m)
		}
	}
	if d := sb.Resources.Disk; d != "" {
		if _, err := ParseDisk("disk", d); err != nil {
			add(t.ID, "sandbox.resources.disk", "%v", err)
		}
	}
	if r := sb.Resources.RootSize; r != "" {
		if _, err := ParseRootSize("rootSize", r); err != nil {
			add(t.ID, "sandbox.resources.rootSize", "%v", err)
		}
	}
	if sb.Image == nil {
		add(t.ID, "sandbox.image", "missing: every sandbox declares an image")
		return
	}
	validateImage(t.ID, "sandbox.image", sb.Image, files, add)
}

// sameSandbox reports whether two declarations of a sandbox name declare
// the same sandbox.
func sameSandbox(a, b *SandboxManifest) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && string(ja) == string(jb)
}

func validateImage(task, field string, img *ImageManifest, files map[string][]byte, add addFunc) {
	if len(img.Steps) == 0 || img.Steps[0].Kind != StepFrom {
		add(task, field+".steps", "an image starts with from(ref)")
	}
	for i, s := range img.Steps {
		f := fmt.Sprintf("%s.steps[%d]", field, i)
		switch s.Kind {
		case StepFrom:
			if s.Ref == "" {
				add(task, f+".ref", "from needs an image reference")
			}
			validateCredentials(task, f, s, add)
			if i > 0 {
				add(task, f, "from may only be the first step")
			}
		case StepRun:
			for name, bs := range s.Secrets {
				switch {
				case !envNamePattern.MatchString(name):
					add(task, f+".secrets", "build secret %q: names are letters, digits and '_'", name)
				case (bs.Env == "") == (bs.File == ""):
					add(task, f+".secrets."+name, "declare exactly one of env or file")
				case bs.Env != "" && !envNamePattern.MatchString(bs.Env):
					add(task, f+".secrets."+name, "%q is not an environment variable name", bs.Env)
				case bs.File != "" && !buildSecretFile.MatchString(bs.File):
					add(task, f+".secrets."+name, "file %q: build secret files go directly under /run/secrets", bs.File)
				}
			}
			if len(s.Argv) == 0 {
				add(task, f+".argv", "run needs a command")
			}
			for j, c := range s.Cache {
				if !path.IsAbs(c.MountPath) || c.Cache == "" {
					add(task, fmt.Sprintf("%s.cache[%d]", f, j), "a cache mount needs an absolute mountPath and a cache name")
				}
			}
		case StepCopy:
			validateCopy(task, f, s, files, add)
		case StepCopyFrom:
			if s.Image == nil || !path.IsAbs(s.Dest) || s.Src == "" {
				add(task, f, "copyFrom needs an image, a source path and an absolute destination")
			} else {
				validateImage(task, f+".image", s.Image, files, add)
			}
		case StepWorkdir:
			if !path.IsAbs(s.Path) {
				add(task, f+".path", "workdir must be absolute, got %q", s.Path)
			}
		case StepEnv:
			if !envNamePattern.MatchString(s.Key) {
				add(task, f+".key", "%q is not a valid environment variable name", s.Key)
			}
		case StepUser:
			if s.User == "" {
				add(task, f+".user", "user needs a name or uid[:gid]")
			}
		default:
			add(task, f+".kind", "unknown image step %q (known: from, run, copy, copyFrom, workdir, env, user)", s.Kind)
		}
	}
}

// validateCredentials checks a from step's credentials: a secret name, and
// only on a registry reference (built-in "helmr/..." and "oci:..." bases,
// images.BasePrefix and images.OCIPrefix, are on the worker).
func validateCredentials(task, f string, s Step, add addFunc) {
	switch {
	case s.Credentials == "":
	case !envNamePattern.MatchString(s.Credentials):
		add(task, f+".credentials", "secret %q: names are letters, digits and '_'", s.Credentials)
	case strings.HasPrefix(s.Ref, "helmr/") || strings.HasPrefix(s.Ref, "oci:"):
		add(task, f+".credentials", "%q is a local base: credentials only apply to registry references", s.Ref)
	}
}

func validateCopy(task, f string, s Step, files map[string][]byte, add addFunc) {
	if !path.IsAbs(s.Dest) {
		add(task, f+".dest", "copy destination must be absolute, got %q", s.Dest)
	}
	if s.Source == nil || (s.Source.Type != "file" && s.Source.Type != "directory") {
		add(task, f+".source", "copy needs source.file(path) or source.directory(path)")
		return
	}
	if p := path.Clean(s.Source.Path); path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") {
		add(task, f+".source", "source path %q escapes the task project", s.Source.Path)
		return
	}
	if s.Mode != nil && *s.Mode > 0o7777 {
		add(task, f+".mode", "copy mode %#o is not a file mode", *s.Mode)
	}
	if s.Owner != "" && !ownerPattern.MatchString(s.Owner) {
		add(task, f+".owner", "copy owner %q: want user, user:group or uid:gid", s.Owner)
	}
	if files == nil || s.Source.Type != "file" {
		return
	}
	if _, ok := files[ContextPath(s.Source.Path)]; !ok {
		add(task, f+".source", "file %q is not part of the deployment", s.Source.Path)
	}
}

var buildSecretFile = regexp.MustCompile(`^/run/secrets/[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

var ownerPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?$`)

// ValidFilePath reports whether p may name a deployment file: clean,
// relative, slash-separated, under bundles/ or context/, no "..".
func ValidFilePath(p string) bool {
	if p == "" || len(p) > 1024 || path.Clean(p) != p || path.IsAbs(p) || strings.ContainsAny(p, "\\\x00") {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." || part == "." {
			return false
		}
	}
	return strings.HasPrefix(p, "bundles/") || strings.HasPrefix(p, "context/")
}

// ValidName reports whether s is a valid project, environment or task name.
func ValidName(s string) bool { return idPattern.MatchString(s) }

// ContextPath is where a project file copied by an image step is stored in a
// deployment's files.
func ContextPath(p string) string { return "context/" + path.Clean(p) }

// Workspace disk bounds: a workspace's filesystem needs room for ext4's
// metadata, and ext4 images here stay below 16 TiB (the image is sparse:
// only what the files take is used on the worker's disk).
const (
	MinDisk = 8 << 20
	MaxDisk = 16 << 40
)

var diskPattern = regexp.MustCompile(`^([0-9]{1,15})(Ki|Mi|Gi|Ti|K|M|G|T)?$`)

// ParseDisk parses a workspace's size quota (what names it in errors): a
// byte count or a number with Ki, Mi, Gi, Ti (powers of 1024) or K, M,
// G, T (of 1000), from MinDisk to MaxDisk.
func ParseDisk(what, s string) (int64, error) {
	return parseBounded(what, s, MinDisk, MaxDisk, "a workspace's size quota is from 8Mi to 16Ti")
}

// Root size bounds: the overlay's own bookkeeping needs some room
// (sandbox.MinRootSize); the layer is a tmpfs or a sparse file, which
// takes only what is written.
const (
	MinRootSize = sandbox.MinRootSize
	MaxRootSize = MaxDisk
)

// ParseRootSize parses the bound of a sandbox's writable root (what names
// it in errors), written as ParseDisk's sizes, from MinRootSize to
// MaxRootSize: a write past it fails with ENOSPC in the sandbox.
func ParseRootSize(what, s string) (int64, error) {
	return parseBounded(what, s, MinRootSize, MaxRootSize, "a sandbox's root size is from 1Mi to 16Ti")
}

// parseBounded parses a whole size from min to max; outside says so.
func parseBounded(what, s string, min, max int64, outside string) (int64, error) {
	m := diskPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%s %q: want a byte count or a number with Ki, Mi, Gi or Ti (\"20Gi\")", what, s)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	mult := map[string]int64{"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
		"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}[m[2]]
	if n > max/mult || n*mult < min {
		return 0, fmt.Errorf("%s %q: %s", what, s, outside)
	}
	return n * mult, nil
}

// FormatSize writes n bytes in the largest binary unit that divides it
// ("10Gi"), else as a byte count.
func FormatSize(n int64) string {
	for _, u := range []struct {
		s string
		v int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return strconv.FormatInt(n/u.v, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// ParseMemory parses "512Mi", "4Gi", "1G" or a byte count.
func ParseMemory(s string) (int64, error) {
	m := memoryPattern.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("memory %q: want a byte count or a number with Ki, Mi, Gi or Ti", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memory %q: %w", s, err)
	}
	mult := map[string]int64{"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
		"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}[m[2]]
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("memory %q: too large", s)
	}
	return n * mult, nil
}
