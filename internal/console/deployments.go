package console

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/helmr/helmr/internal/deployments"
)

type deploymentsData struct {
	Deployments []deployments.Deployment
}

// deploymentsPage lists the project environment's deployments, newest
// first, with their state.
func (c *Console) deploymentsPage(r *http.Request, v *View) (any, error) {
	v.Title = "Deployments"
	var d deploymentsData
	if v.Project == "" {
		return d, nil
	}
	var page struct {
		Deployments []deployments.Deployment `json:"deployments"`
	}
	if err := v.Get("/v1/deployments?"+scopeQuery(v)+"&limit=100", &page); err != nil {
		return nil, err
	}
	d.Deployments = page.Deployments
	return d, nil
}

// taskView is a task of a deployment as its page shows it.
type taskView struct {
	Spec    deployments.TaskManifest
	Image   *deployments.ImageBuild
	Secrets []secretPlacement
}

// secretPlacement is a declared secret: its name and where the sandbox
// gets it (never a value: the deployment has none).
type secretPlacement struct {
	Name  string
	Where string
}

type deploymentData struct {
	D     deployments.Deployment
	Tasks []taskView
}

// deploymentPage is one deployment: its state, the build run's log (live
// while it builds), and each task's image and declared sandbox and
// secrets.
func (c *Console) deploymentPage(r *http.Request, v *View) (any, error) {
	var d deploymentData
	if err := v.Get("/v1/deployments/"+url.PathEscape(r.PathValue("id")), &d.D); err != nil {
		return nil, err
	}
	v.Title = fmt.Sprintf("%s v%d", d.D.Project, d.D.Version)
	v.Project, v.Env = d.D.Project, d.D.Env
	for _, t := range d.D.Manifest.Tasks {
		tv := taskView{Spec: t}
		if img, ok := d.D.Images[t.ID]; ok {
			tv.Image = &img
		}
		for name, s := range t.Secrets {
			tv.Secrets = append(tv.Secrets, secretPlacement{Name: name, Where: placement(s)})
		}
		sort.Slice(tv.Secrets, func(i, j int) bool { return tv.Secrets[i].Name < tv.Secrets[j].Name })
		d.Tasks = append(d.Tasks, tv)
	}
	return d, nil
}

// placement says where a secret goes in the sandbox.
func placement(s deployments.SecretTarget) string {
	var parts []string
	if s.Env != "" {
		parts = append(parts, "env "+s.Env)
	}
	if s.File != "" {
		parts = append(parts, "file "+s.File)
	}
	if s.Directory != "" {
		dir := "directory " + s.Directory
		if len(s.Files) > 0 {
			dir += " (" + strings.Join(s.Files, ", ") + ")"
		}
		parts = append(parts, dir)
	}
	if s.Mode != "" {
		parts = append(parts, "mode "+s.Mode)
	}
	if s.Owner != "" {
		parts = append(parts, "owner "+s.Owner)
	}
	if s.Egress != nil {
		e := "a placeholder; the value goes only to " + strings.Join(s.Egress.Hosts, ", ")
		if s.Egress.Body {
			e += " (headers and bodies)"
		}
		parts = append(parts, e)
	}
	if len(parts) == 0 {
		return "unspecified"
	}
	return strings.Join(parts, "; ")
}
