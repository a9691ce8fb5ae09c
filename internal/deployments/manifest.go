package deployments

import (
	"encoding/json"
	"sort"

	"github.com/helmr/helmr/internal/vault"
)

// Manifest is what indexing a task project produces: the plain-JSON form of
// the SDK's declarations. The SDK (sdk/typescript) writes exactly this shape.
type Manifest struct {
	Project string         `json:"project"`
	Tasks   []TaskManifest `json:"tasks"`
}

// TaskManifest is one task declaration.
type TaskManifest struct {
	ID string `json:"id"`
	// Module is the bundle path (in Deployment.Files) that exports the task.
	Module string `json:"module"`
	// Export is the module's export name holding the task.
	Export string `json:"export"`
	// MaxDuration in seconds; 0 means the server default.
	MaxDuration int                     `json:"maxDuration,omitempty"`
	Secrets     map[string]SecretTarget `json:"secrets,omitempty"`
	Sandbox     *SandboxManifest        `json:"sandbox"`
	HasRun      bool                    `json:"hasRun"`
	// Retry is the task's retry policy (nil: one attempt).
	Retry *RetryPolicy `json:"retry,omitempty"`
	// Queue is the queue its runs wait in (nil: its own, unlimited).
	Queue *QueueManifest `json:"queue,omitempty"`
	// Input is the payload's JSON Schema (see CompileInput); a trigger
	// whose payload does not fit is refused. Empty: any payload.
	Input json.RawMessage `json:"input,omitempty"`
	// Schedule, if set, runs the task on a cron schedule: deploying
	// creates, updates or removes its declarative schedule (package
	// schedules).
	Schedule *ScheduleManifest `json:"schedule,omitempty"`
}

// ScheduleManifest is a task's declared schedule: a cron expression (five
// fields, or six with leading seconds) in an IANA time zone (default UTC).
type ScheduleManifest struct {
	Cron     string `json:"cron"`
	Timezone string `json:"timezone,omitempty"`
}

// SecretTarget says where a declared secret appears inside the sandbox.
// Exactly one of Env, File, Directory is set.
type SecretTarget struct {
	Env       string   `json:"env,omitempty"`
	File      string   `json:"file,omitempty"`
	Directory string   `json:"directory,omitempty"`
	Files     []string `json:"files,omitempty"`
	Mode      string   `json:"mode,omitempty"`
	Owner     string   `json:"owner,omitempty"`
	// Egress, if set, binds the secret for egress injection to these
	// hosts: the sandbox holds a placeholder, never the value (see
	// vault.Egress). A vault secret that has its own rule must allow
	// every host named here.
	Egress *vault.Egress `json:"egress,omitempty"`
}

// SandboxManifest is a sandbox declaration.
type SandboxManifest struct {
	Name      string         `json:"name"`
	Image     *ImageManifest `json:"image"`
	Workspace string         `json:"workspace,omitempty"` // default /workspace
	Resources Resources      `json:"resources"`
}

// Resources are a sandbox's requested vCPUs and memory ("512Mi", "4Gi"),
// the size quota of the workspaces made for it (Disk, "20Gi"; empty: the
// worker's HELMR_WORKSPACE_QUOTA) and the bound of what it writes to its
// root outside the workspace (RootSize, "2Gi"; empty: the worker's
// HELMR_ROOT_SIZE; see ParseRootSize).
type Resources struct {
	CPU      float64 `json:"cpu,omitempty"`
	Memory   string  `json:"memory,omitempty"`
	Disk     string  `json:"disk,omitempty"`
	RootSize string  `json:"rootSize,omitempty"`
}

// ImageManifest is an image declaration: ordered build steps.
type ImageManifest struct {
	Name  string `json:"name"`
	Steps []Step `json:"steps"`
}

// Step kinds.
const (
	StepFrom     = "from"
	StepRun      = "run"
	StepCopy     = "copy"
	StepCopyFrom = "copyFrom"
	StepWorkdir  = "workdir"
	StepEnv      = "env"
	StepUser     = "user"
)

// Step is one image build step; Kind selects which fields apply.
type Step struct {
	Kind string `json:"kind"`
	// from
	Ref string `json:"ref,omitempty"`
	// Credentials names the vault secret holding the registry credentials
	// a registry Ref is pulled with (see images for its formats); empty:
	// an anonymous pull.
	Credentials string `json:"credentials,omitempty"`
	// run
	Argv  []string     `json:"argv,omitempty"`
	Cache []CacheMount `json:"cache,omitempty"`
	// Secrets are build secrets: vault secrets (by name) the step reads,
	// for that step only.
	Secrets map[string]BuildSecret `json:"secrets,omitempty"`
	// copy
	Dest   string  `json:"dest,omitempty"`
	Source *Source `json:"source,omitempty"`
	Owner  string  `json:"owner,omitempty"` // "user", "user:group" or "uid:gid" in the image
	Mode   *uint32 `json:"mode,omitempty"`  // every copied file's mode; default: 0644, 0755 if executable
	// copyFrom
	Image *ImageManifest `json:"image,omitempty"`
	Src   string         `json:"src,omitempty"`
	// workdir
	Path string `json:"path,omitempty"`
	// env
	Key   string `json:"key,omitempty"`
	Value string `json:"value,omitempty"`
	// user
	User string `json:"user,omitempty"`
}

// BuildSecret places a build secret during its run step: an environment
// variable, or a file under /run/secrets.
type BuildSecret struct {
	Env  string `json:"env,omitempty"`
	File string `json:"file,omitempty"`
}

// BuildSecretNames lists the vault secrets building img reads: the build
// secrets of its run steps and the registry credentials of its from step,
// and those of the images it copies from.
func BuildSecretNames(img *ImageManifest) []string {
	seen := map[string]bool{}
	var walk func(*ImageManifest)
	walk = func(m *ImageManifest) {
		if m == nil {
			return
		}
		for _, s := range m.Steps {
			if s.Credentials != "" {
				seen[s.Credentials] = true
			}
			for n := range s.Secrets {
				seen[n] = true
			}
			walk(s.Image)
		}
	}
	walk(img)
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// CacheMount mounts a named persistent cache into a run step.
type CacheMount struct {
	MountPath string `json:"mountPath"`
	Cache     string `json:"cache"`
}

// Source is a file or directory of the task project, relative to its root.
type Source struct {
	Type string `json:"type"` // "file" or "directory"
	Path string `json:"path"`
	// Executables (filled in by deploy) are the project-relative paths of
	// the source's files that have an executable bit.
	Executables []string `json:"executables,omitempty"`
}
