package deployments

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/errdefs"
)

func imageTask(img *ImageManifest) Manifest {
	return Manifest{Project: "p", Tasks: []TaskManifest{{
		ID: "t", Module: "bundles/t.js", Export: "t", HasRun: true,
		Sandbox: &SandboxManifest{Name: "s", Image: img},
	}}}
}

func TestValidateCredentials(t *testing.T) {
	from := func(ref, creds string) *ImageManifest {
		return &ImageManifest{Name: "i", Steps: []Step{{Kind: StepFrom, Ref: ref, Credentials: creds}}}
	}
	for _, tc := range []struct {
		name string
		img  *ImageManifest
		want string // "" = valid
	}{
		{"anonymous registry", from("node:24", ""), ""},
		{"registry with credentials", from("registry.example/team/img:v1", "REGISTRY_AUTH"), ""},
		{"bad name", from("registry.example/team/img:v1", "registry-auth"), `steps[0].credentials: secret "registry-auth": names are letters, digits and '_'`},
		{"name with a value's look", from("node:24", "user:pass"), `secret "user:pass"`},
		{"built-in base", from("helmr/bookworm-node22", "TOKEN"), `"helmr/bookworm-node22" is a local base: credentials only apply to registry references`},
		{"oci base", from("oci:team-base", "TOKEN"), `"oci:team-base" is a local base: credentials only apply to registry references`},
		{"in a copyFrom image", &ImageManifest{Name: "i", Steps: []Step{
			{Kind: StepFrom, Ref: "node:24"},
			{Kind: StepCopyFrom, Image: from("oci:tools", "TOKEN"), Src: "/bin/jq", Dest: "/usr/bin/jq"},
		}}, `sandbox.image.steps[1].image.steps[0].credentials: "oci:tools" is a local base`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := imageTask(tc.img).Validate(nil)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an errdefs.ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestBuildSecretNames(t *testing.T) {
	img := &ImageManifest{Name: "app", Steps: []Step{
		{Kind: StepFrom, Ref: "registry.example/app-base:v1", Credentials: "APP_REGISTRY"},
		{Kind: StepRun, Argv: []string{"npm", "ci"}, Secrets: map[string]BuildSecret{"NPM_TOKEN": {Env: "NPM_TOKEN"}}},
		{Kind: StepCopyFrom, Src: "/bin/tool", Dest: "/bin/tool", Image: &ImageManifest{Name: "tools", Steps: []Step{
			{Kind: StepFrom, Ref: "registry.example/tools:v1", Credentials: "TOOLS_REGISTRY"},
			{Kind: StepRun, Argv: []string{"true"}, Secrets: map[string]BuildSecret{"NPM_TOKEN": {File: "/run/secrets/npm"}}},
		}}},
	}}
	got := BuildSecretNames(img)
	want := []string{"APP_REGISTRY", "NPM_TOKEN", "TOOLS_REGISTRY"}
	if !slices.Equal(got, want) {
		t.Errorf("BuildSecretNames = %v, want %v", got, want)
	}
	if got := BuildSecretNames(&ImageManifest{Steps: []Step{{Kind: StepFrom, Ref: "node:24"}}}); len(got) != 0 {
		t.Errorf("BuildSecretNames(anonymous base) = %v, want none", got)
	}
}

// TestValidateSecretDeclarations refuses secret declarations that name a
// bad secret or place it where it must not go: the kernel's and Helmr's
// trees, paths escaping with "..", relative paths, file names with
// slashes.
func TestValidateSecretDeclarations(t *testing.T) {
	task := func(secrets map[string]SecretTarget) Manifest {
		m := imageTask(&ImageManifest{Name: "i", Steps: []Step{{Kind: StepFrom, Ref: "helmr/bookworm-node22"}}})
		m.Tasks[0].Secrets = secrets
		return m
	}
	for _, tc := range []struct {
		name    string
		secrets map[string]SecretTarget
		want    string // "" = valid
	}{
		{"env", map[string]SecretTarget{"API_TOKEN": {Env: "API_TOKEN"}}, ""},
		{"file", map[string]SecretTarget{"KEY": {File: "/home/app/.ssh/id_ed25519", Mode: "0400", Owner: "app"}}, ""},
		{"directory", map[string]SecretTarget{"CERTS": {Directory: "/etc/certs", Files: []string{"tls.crt", "tls.key"}}}, ""},
		{"name with a path character", map[string]SecretTarget{"a/b": {Env: "X"}}, "secrets.a/b: secret names are letters, digits and '_'"},
		{"under /proc", map[string]SecretTarget{"K": {File: "/proc/self/environ"}}, `path "/proc/self/environ"`},
		{"under /opt/helmr", map[string]SecretTarget{"K": {File: "/opt/helmr/runtime/adapter.mjs"}}, `path "/opt/helmr/runtime/adapter.mjs"`},
		{"escaping with ..", map[string]SecretTarget{"K": {File: "/etc/../proc/x"}}, "must be absolute and clean"},
		{"relative", map[string]SecretTarget{"K": {File: "secrets/key"}}, "must be absolute and clean"},
		{"two placements", map[string]SecretTarget{"K": {Env: "K", File: "/etc/k"}}, "exactly one of env, file or directory"},
		{"file name with a slash", map[string]SecretTarget{"K": {Directory: "/etc/k", Files: []string{"../x"}}}, `"../x" is not a file name`},
		{"bad mode", map[string]SecretTarget{"K": {File: "/etc/k", Mode: "rwx"}}, "mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := task(tc.secrets).Validate(nil)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an errdefs.ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestValidateSandboxNames(t *testing.T) {
	img := &ImageManifest{Name: "i", Steps: []Step{{Kind: StepFrom, Ref: "helmr/bookworm-node22"}}}
	task := func(id string, sb SandboxManifest) TaskManifest {
		sb.Image = img
		return TaskManifest{ID: id, Module: "bundles/t.js", Export: id, HasRun: true, Sandbox: &sb}
	}
	for _, tc := range []struct {
		name  string
		tasks []TaskManifest
		want  string // "" = valid
	}{
		{"one sandbox, two tasks", []TaskManifest{task("a", SandboxManifest{Name: "agent"}), task("b", SandboxManifest{Name: "agent"})}, ""},
		{"two sandboxes", []TaskManifest{task("a", SandboxManifest{Name: "agent"}), task("b", SandboxManifest{Name: "agent", Workspace: "/src"})},
			`task "b": sandbox.name: sandbox "agent" is declared again with other settings than task a's`},
		{"other resources", []TaskManifest{task("a", SandboxManifest{Name: "agent"}), task("b", SandboxManifest{Name: "agent", Resources: Resources{CPU: 2}})},
			`sandbox "agent" is declared again`},
		{"no name", []TaskManifest{task("a", SandboxManifest{})}, `task "a": sandbox.name: must be 1-128 letters`},
		{"a path as a name", []TaskManifest{task("a", SandboxManifest{Name: "../x"})}, `task "a": sandbox.name: must be 1-128 letters`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Manifest{Project: "p", Tasks: tc.tasks}.Validate(nil)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an errdefs.ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestValidateDisk(t *testing.T) {
	for disk, want := range map[string]string{
		"":      "",
		"20Gi":  "",
		"8Mi":   "",
		"16Ti":  "",
		"4Mi":   `sandbox.resources.disk: disk "4Mi": a workspace's size quota is from 8Mi to 16Ti`,
		"17Ti":  `sandbox.resources.disk: disk "17Ti": a workspace's size quota is from 8Mi to 16Ti`,
		"1.5Gi": `sandbox.resources.disk: disk "1.5Gi": want a byte count`,
		"lots":  `sandbox.resources.disk: disk "lots": want a byte count`,
	} {
		m := imageTask(&ImageManifest{Name: "i", Steps: []Step{{Kind: StepFrom, Ref: "helmr/bookworm-node22"}}})
		m.Tasks[0].Sandbox.Resources.Disk = disk
		err := m.Validate(nil)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("Validate(disk %q) = %v, want %q", disk, err, want)
		}
	}
	if n, err := ParseDisk("disk", "20Gi"); err != nil || n != 20<<30 {
		t.Errorf("ParseDisk(20Gi) = %d, %v", n, err)
	}
}

func TestValidateRootSize(t *testing.T) {
	for size, want := range map[string]string{
		"":      "",
		"2Gi":   "",
		"1Mi":   "",
		"16Ti":  "",
		"512Ki": `sandbox.resources.rootSize: rootSize "512Ki": a sandbox's root size is from 1Mi to 16Ti`,
		"17Ti":  `sandbox.resources.rootSize: rootSize "17Ti": a sandbox's root size is from 1Mi to 16Ti`,
		"0":     `sandbox.resources.rootSize: rootSize "0": a sandbox's root size is from 1Mi to 16Ti`,
		"2GiB":  `sandbox.resources.rootSize: rootSize "2GiB": want a byte count`,
	} {
		m := imageTask(&ImageManifest{Name: "i", Steps: []Step{{Kind: StepFrom, Ref: "helmr/bookworm-node22"}}})
		m.Tasks[0].Sandbox.Resources.RootSize = size
		err := m.Validate(nil)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("Validate(rootSize %q) = %v, want %q", size, err, want)
		}
	}
	if n, err := ParseRootSize("rootSize", "2Gi"); err != nil || n != 2<<30 {
		t.Errorf("ParseRootSize(2Gi) = %d, %v", n, err)
	}
}
