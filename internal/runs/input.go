package runs

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
)

// checkInput refuses a payload that does not fit the task's declared input
// (its JSON Schema), with an errdefs.ErrInvalid naming each bad field's path
// ("payload.repo: missing property"). A task without one takes any payload.
//
// The schema is compiled again at every trigger (deploy refused schemas
// that do not compile): a typical input compiles in tens of microseconds,
// less than the trigger's store round trips, and nothing is cached in one
// replica's memory.
func checkInput(task deployments.Task, payload json.RawMessage) error {
	if len(task.Spec.Input) == 0 {
		return nil
	}
	in, err := deployments.CompileInput(task.Spec.Input)
	if err != nil {
		// Deploy compiled it: a stored schema that no longer compiles is
		// the control plane's fault, not the caller's.
		return fmt.Errorf("task %q's input schema (deployment %s): %v", task.ID, task.DeploymentID, err)
	}
	problems, err := in.Check(payload)
	if err != nil {
		return fmt.Errorf("check the payload of task %q: %w", task.ID, err)
	}
	if len(problems) == 0 {
		return nil
	}
	parts := make([]string, len(problems))
	for i, p := range problems {
		parts[i] = p.String()
	}
	return errdefs.Invalidf("%s (the payload does not fit the input of task %q)", strings.Join(parts, "; "), task.ID)
}
