package runs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/vault"
)

// SecretVault is what runs need of the vault: values to check payloads
// against and to hand the worker that holds a run.
type SecretVault interface {
	Reveal(ctx context.Context, project, env, name string) ([]byte, error)
	List(ctx context.Context, project, env string) ([]vault.Meta, error)
}

// checkBindings makes sure a run binds exactly the secrets its task
// declares, each to a vault secret that exists.
func (s *Service) checkBindings(ctx context.Context, req TriggerRequest, task deployments.Task) error {
	declared := task.Spec.Secrets
	for name := range req.Secrets {
		if _, ok := declared[name]; !ok {
			return fmt.Errorf("task %s declares no secret %q: %w", req.TaskID, name, errdefs.ErrInvalid)
		}
	}
	var missing []string
	for name := range declared {
		if _, ok := req.Secrets[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("task %s declares the secret(s) %s, which the run does not bind (helmr run %s --secret %s=vault:NAME): %w",
			req.TaskID, strings.Join(missing, ", "), req.TaskID, missing[0], errdefs.ErrInvalid)
	}
	for name, src := range req.Secrets {
		scheme, ref, _ := strings.Cut(src, ":")
		switch scheme {
		case "vault":
		case "env", "file":
			return fmt.Errorf("secret %s: %q is a local source, which a control plane cannot read; store the value in the vault (printf '%%s' \"$VALUE\" | helmr secret set %s) and bind vault:%s: %w", name, src, name, name, errdefs.ErrInvalid)
		default:
			return fmt.Errorf("secret %s: source %q: want vault:NAME: %w", name, src, errdefs.ErrInvalid)
		}
		if !vault.ValidName(ref) {
			return fmt.Errorf("secret %s: %q is not a vault secret name: %w", name, ref, errdefs.ErrInvalid)
		}
		if s.Vault == nil {
			return fmt.Errorf("secret %s: this control plane has no vault (HELMR_MASTER_KEY): %w", name, errdefs.ErrInvalid)
		}
		if _, err := s.Vault.Reveal(ctx, req.Project, req.Env, ref); err != nil {
			return fmt.Errorf("secret %s: vault secret %s in %s/%s: %v: %w", name, ref, req.Project, req.Env, err, errdefs.ErrInvalid)
		}
	}
	return nil
}

// checkPayload refuses a payload that holds the value of a secret of the
// run's environment: payloads are stored in plaintext as audit data.
func (s *Service) checkPayload(ctx context.Context, req TriggerRequest) error {
	if s.Vault == nil {
		return nil
	}
	ms, err := s.Vault.List(ctx, req.Project, req.Env)
	if err != nil {
		return fmt.Errorf("check the payload against the vault: %w", err)
	}
	for _, m := range ms {
		v, err := s.Vault.Reveal(ctx, req.Project, req.Env, m.Name)
		if err != nil {
			return fmt.Errorf("check the payload against the vault: %w", err)
		}
		quoted, _ := json.Marshal(string(v))
		if bytes.Contains(req.Payload, v) || bytes.Contains(req.Payload, quoted[1:len(quoted)-1]) {
			return fmt.Errorf("the payload contains the value of the secret %s: payloads are stored in plaintext as audit data; bind the secret to the run instead (--secret NAME=vault:%s): %w", m.Name, m.Name, errdefs.ErrInvalid)
		}
	}
	return nil
}

// RunSecrets returns the values of a run's bound secrets, by declared name,
// for the worker that holds it: only while the run is STARTING or RUNNING.
func (s *Service) RunSecrets(ctx context.Context, runID string) (map[string][]byte, error) {
	r, err := s.underway(ctx, runID)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for name, src := range r.Secrets {
		_, ref, _ := strings.Cut(src, ":")
		if s.Vault == nil {
			return nil, fmt.Errorf("run %s binds secrets and this control plane has no vault", runID)
		}
		v, err := s.Vault.Reveal(ctx, r.Project, r.Env, ref)
		if err != nil {
			return nil, fmt.Errorf("secret %s of run %s: %w", name, runID, err)
		}
		out[name] = v
	}
	return out, nil
}

// DeploymentLookup finds a deployment (its manifest) by id.
type DeploymentLookup interface {
	GetDeployment(ctx context.Context, id string) (deployments.Deployment, error)
}

// RunBuildSecret returns the value of a build secret for the worker
// building a run's image: only while the run is STARTING or RUNNING, and
// only a secret a run step of the run's task image (at its deployment)
// names.
func (s *Service) RunBuildSecret(ctx context.Context, runID, name string) ([]byte, error) {
	r, err := s.underway(ctx, runID)
	if err != nil {
		return nil, err
	}
	if s.Deployments == nil || s.Vault == nil {
		return nil, fmt.Errorf("this control plane cannot hand out build secrets (no vault): %w", errdefs.ErrConflict)
	}
	d, err := s.Deployments.GetDeployment(ctx, r.DeploymentID)
	if err != nil {
		return nil, err
	}
	for _, t := range d.Manifest.Tasks {
		if (t.ID != r.TaskID && r.Kind != KindBuild) || t.Sandbox == nil {
			continue // a build run builds every task's image
		}
		for _, n := range deployments.BuildSecretNames(t.Sandbox.Image) {
			if n == name {
				v, err := s.Vault.Reveal(ctx, r.Project, r.Env, name)
				if err != nil {
					return nil, fmt.Errorf("build secret %s in %s/%s: %w", name, r.Project, r.Env, err)
				}
				return v, nil
			}
		}
	}
	return nil, fmt.Errorf("the image of run %s names no build secret %q: %w", runID, name, errdefs.ErrNotFound)
}

// underway returns a run that is STARTING or RUNNING, the only states in
// which its worker may have its secrets.
func (s *Service) underway(ctx context.Context, runID string) (Run, error) {
	r, err := s.store.GetRun(ctx, runID)
	if err != nil {
		return Run{}, err
	}
	if r.Status != StatusStarting && r.Status != StatusRunning {
		return Run{}, fmt.Errorf("run %s is %s: its secrets go only to the worker running it: %w", runID, r.Status, errdefs.ErrConflict)
	}
	return r, nil
}
