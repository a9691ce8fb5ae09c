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
	Open(ctx context.Context, project, env, name string) (vault.Value, error)
	List(ctx context.Context, project, env string) ([]vault.Meta, error)
}

// BoundSecret is one of a run's bound secrets as the worker holding the
// run gets it.
type BoundSecret struct {
	Value []byte
	// Egress, if set, binds the value for egress: it must not enter the
	// sandbox; a placeholder does, and the worker's network stack puts
	// the value into requests to these hosts. Nil: the value is placed in
	// the sandbox (vault.ModeSandbox).
	Egress *vault.Egress
}

// EffectiveEgress is where a bound secret may go: the task's declaration
// (target) narrowed by the vault secret's own rule. A task may name only
// hosts the rule allows, and ask for body substitution only where the
// rule allows it; with no rule the task's declaration stands, and with
// neither the secret is placed in the sandbox (nil).
func EffectiveEgress(secret string, target, rule *vault.Egress) (*vault.Egress, error) {
	switch {
	case target == nil && rule == nil:
		return nil, nil
	case target == nil:
		return rule, nil
	}
	t, err := target.Normalize()
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", secret, err)
	}
	if rule == nil {
		return &t, nil
	}
	for _, h := range t.Hosts {
		if !rule.Covers(h) {
			return nil, fmt.Errorf("secret %s: the task sends it to %s, which its vault secret does not allow (its hosts: %s)", secret, h, strings.Join(rule.Hosts, ", "))
		}
	}
	if t.Body && !rule.Body {
		return nil, fmt.Errorf("secret %s: the task substitutes it in request bodies, which its vault secret does not allow (set it with --body)", secret)
	}
	return &t, nil
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
		val, err := s.Vault.Open(ctx, req.Project, req.Env, ref)
		if err != nil {
			return fmt.Errorf("secret %s: vault secret %s in %s/%s: %v: %w", name, ref, req.Project, req.Env, err, errdefs.ErrInvalid)
		}
		e, err := EffectiveEgress(name, declared[name].Egress, val.Egress)
		if err != nil {
			return fmt.Errorf("%v: %w", err, errdefs.ErrInvalid)
		}
		if e != nil && declared[name].Directory == "" {
			if _, _, ok := vault.SplitLine(val.Bytes); !ok {
				return fmt.Errorf("secret %s is bound for egress (it goes into request headers) and vault secret %s is not one line of text: keep multi-line values in the sandbox: %w", name, ref, errdefs.ErrInvalid)
			}
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
// with where each may go (EffectiveEgress), for the worker that holds it:
// only while the run is STARTING or RUNNING.
func (s *Service) RunSecrets(ctx context.Context, runID string) (map[string]BoundSecret, error) {
	r, err := s.underway(ctx, runID)
	if err != nil {
		return nil, err
	}
	out := map[string]BoundSecret{}
	if len(r.Secrets) == 0 {
		return out, nil
	}
	if s.Vault == nil {
		return nil, fmt.Errorf("run %s binds secrets and this control plane has no vault", runID)
	}
	var declared map[string]deployments.SecretTarget
	if s.Deployments != nil {
		d, err := s.Deployments.GetDeployment(ctx, r.DeploymentID)
		if err != nil {
			return nil, err
		}
		for _, t := range d.Manifest.Tasks {
			if t.ID == r.TaskID {
				declared = t.Secrets
			}
		}
	}
	for name, src := range r.Secrets {
		_, ref, _ := strings.Cut(src, ":")
		v, err := s.Vault.Open(ctx, r.Project, r.Env, ref)
		if err != nil {
			return nil, fmt.Errorf("secret %s of run %s: %w", name, runID, err)
		}
		e, err := EffectiveEgress(name, declared[name].Egress, v.Egress)
		if err != nil {
			// The rule changed since the run was triggered: refuse rather
			// than place a value its rule now keeps out of sandboxes.
			return nil, fmt.Errorf("run %s: %v: %w", runID, err, errdefs.ErrConflict)
		}
		out[name] = BoundSecret{Value: v.Bytes, Egress: e}
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
func (s *Service) RunBuildSecret(ctx context.Context, runID, name string) (BoundSecret, error) {
	r, err := s.underway(ctx, runID)
	if err != nil {
		return BoundSecret{}, err
	}
	if s.Deployments == nil || s.Vault == nil {
		return BoundSecret{}, fmt.Errorf("this control plane cannot hand out build secrets (no vault): %w", errdefs.ErrConflict)
	}
	d, err := s.Deployments.GetDeployment(ctx, r.DeploymentID)
	if err != nil {
		return BoundSecret{}, err
	}
	for _, t := range d.Manifest.Tasks {
		if (t.ID != r.TaskID && r.Kind != KindBuild) || t.Sandbox == nil {
			continue // a build run builds every task's image
		}
		for _, n := range deployments.BuildSecretNames(t.Sandbox.Image) {
			if n == name {
				v, err := s.Vault.Open(ctx, r.Project, r.Env, name)
				if err != nil {
					return BoundSecret{}, fmt.Errorf("build secret %s in %s/%s: %w", name, r.Project, r.Env, err)
				}
				return BoundSecret{Value: v.Bytes, Egress: v.Egress}, nil
			}
		}
	}
	return BoundSecret{}, fmt.Errorf("the image of run %s names no build secret %q: %w", runID, name, errdefs.ErrNotFound)
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
