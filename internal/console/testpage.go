package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
)

// recentPayloads is how many distinct payloads of recent runs the test
// page offers again.
const recentPayloads = 5

// taskInfo is a task of the current deployment (GET /v1/tasks).
type taskInfo struct {
	ID                string `json:"id"`
	DeploymentVersion int    `json:"deploymentVersion"`
	Spec              struct {
		Input   json.RawMessage `json:"input"`
		Secrets map[string]struct {
			Env       string `json:"env"`
			File      string `json:"file"`
			Directory string `json:"directory"`
		} `json:"secrets"`
	} `json:"spec"`
}

// declaredSecret is a secret a task declares and where it appears.
type declaredSecret struct {
	Name, Placement string
}

type testData struct {
	Tasks   []taskInfo
	Task    *taskInfo
	Secrets []declaredSecret
	Vault   []string   // the vault's secret names, if the principal may list them
	Recent  []string   // recent payloads of the task, pretty, newest first
	Payload string     // the editor's first content
	Input   *inputForm // the payload form from the task's input; nil without one
}

// testPage triggers a task of the current deployment with an edited
// payload and secret bindings (by its script); recent payloads of the
// task are offered again.
func (c *Console) testPage(r *http.Request, v *View) (any, error) {
	v.Title = "Test"
	var d testData
	if v.Project == "" {
		return d, nil
	}
	scope := url.Values{"project": {v.Project}, "env": {v.Env}}
	var tasks struct {
		Tasks []taskInfo `json:"tasks"`
	}
	if err := v.Get("/v1/tasks?"+scope.Encode(), &tasks); err != nil {
		return nil, err
	}
	d.Tasks = tasks.Tasks
	want := r.URL.Query().Get("task")
	for i := range d.Tasks {
		if d.Tasks[i].ID == want {
			d.Task = &d.Tasks[i]
		}
	}
	if d.Task == nil {
		return d, nil
	}
	for name, s := range d.Task.Spec.Secrets {
		p := "env " + s.Env
		switch {
		case s.File != "":
			p = "file " + s.File
		case s.Directory != "":
			p = "directory " + s.Directory
		}
		d.Secrets = append(d.Secrets, declaredSecret{Name: name, Placement: p})
	}
	sort.Slice(d.Secrets, func(i, j int) bool { return d.Secrets[i].Name < d.Secrets[j].Name })
	var vault struct {
		Secrets []struct {
			Name string `json:"name"`
		} `json:"secrets"`
	}
	if err := v.Get("/v1/secrets?"+scope.Encode(), &vault); err == nil {
		for _, s := range vault.Secrets {
			d.Vault = append(d.Vault, s.Name)
		}
	}
	q := url.Values{"project": {v.Project}, "env": {v.Env}, "task": {d.Task.ID}, "limit": {"20"}}
	var page struct {
		Runs []struct {
			Payload json.RawMessage `json:"payload"`
		} `json:"runs"`
	}
	if err := v.Get("/v1/runs?"+q.Encode(), &page); err == nil {
		seen := map[string]bool{}
		for _, run := range page.Runs {
			var buf bytes.Buffer
			if len(run.Payload) == 0 || json.Indent(&buf, run.Payload, "", "  ") != nil {
				continue
			}
			if p := string(unescapeHTML(buf.Bytes())); !seen[p] && len(d.Recent) < recentPayloads {
				seen[p] = true
				d.Recent = append(d.Recent, p)
			}
		}
	}
	d.Input = buildInputForm(d.Task.Spec.Input)
	d.Payload = "{}"
	if d.Input != nil {
		d.Payload = initialPayload(d.Task.Spec.Input)
	}
	if len(d.Recent) > 0 {
		d.Payload = d.Recent[0]
	}
	return d, nil
}
