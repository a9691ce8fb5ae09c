package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/helmr/helmr/internal/workspaces"
)

// maxViewBytes bounds a file shown as text on the workspace page; a
// larger one is cut there (and can be downloaded whole).
const maxViewBytes = 1 << 20

type workspacesData struct {
	Workspaces []workspaces.Workspace
}

// workspacesPage lists the project environment's workspaces.
func (c *Console) workspacesPage(r *http.Request, v *View) (any, error) {
	v.Title = "Workspaces"
	var d workspacesData
	if v.Project == "" {
		return d, nil
	}
	var page struct {
		Workspaces []workspaces.Workspace `json:"workspaces"`
	}
	if err := v.Get("/v1/workspaces?"+scopeQuery(v)+"&limit=200", &page); err != nil {
		return nil, err
	}
	d.Workspaces = page.Workspaces
	return d, nil
}

// crumb is one link of the path to the directory shown.
type crumb struct {
	Name, Path string
}

// fileView is a file shown as text.
type fileView struct {
	Path      string
	Text      string
	Truncated bool
	Binary    bool
	Err       string
}

// opView is one direct operation of the trajectory.
type opView struct {
	Seq        int64
	Kind       string
	Command    string
	Exited     bool // the result has an exit code
	ExitCode   int
	Signal     string
	DurationMs float64
	Output     string
	Error      string
	Started    string
}

type workspaceData struct {
	W       workspaces.Workspace
	Dir     string // the directory shown, "" for the workspace's root
	Crumbs  []crumb
	Entries []workspaces.DirEntry
	DirErr  string
	File    *fileView
	Ops     []opView
	OpsErr  string
}

// workspacePage is a workspace: its facts, a file browser (when the
// principal may run direct operations: listing and reading are ones),
// its trajectory and the place of its terminal.
func (c *Console) workspacePage(r *http.Request, v *View) (any, error) {
	var d workspaceData
	id := r.PathValue("id")
	if err := v.Get("/v1/workspaces/"+url.PathEscape(id), &d.W); err != nil {
		return nil, err
	}
	v.Title = "Workspace " + d.W.ID
	v.Project, v.Env = d.W.Project, d.W.Env
	base := "/v1/workspaces/" + url.PathEscape(d.W.ID)
	if v.Me.Can("workspaces:exec") && d.W.DeletedAt == nil {
		q := r.URL.Query()
		d.Dir = cleanRel(q.Get("path"))
		d.Crumbs = crumbs(d.Dir)
		var dir workspaces.Dir
		if err := v.Get(base+"/dir?path="+url.QueryEscape(orDot(d.Dir)), &dir); err != nil {
			d.DirErr = c.partError(r, err)
		} else {
			d.Entries = dir.Entries
		}
		if f := cleanRel(q.Get("file")); f != "" {
			d.File = c.viewFile(r, v, base, f)
		}
	}
	var traj struct {
		Operations []workspaces.OpRecord `json:"operations"`
	}
	if err := v.Get(base+"/trajectory?limit=1000", &traj); err != nil {
		d.OpsErr = c.partError(r, err)
	}
	for _, op := range traj.Operations {
		d.Ops = append(d.Ops, opOf(op))
	}
	return d, nil
}

// viewFile reads a file of the workspace to show it as text.
func (c *Console) viewFile(r *http.Request, v *View, base, rel string) *fileView {
	fv := &fileView{Path: rel}
	data, cut, err := v.getRaw(base+"/files?path="+url.QueryEscape(rel), maxViewBytes)
	if err != nil {
		fv.Err = c.partError(r, err)
		return fv
	}
	if cut {
		// The cut may split a character: drop its start.
		for len(data) > 0 && !utf8.Valid(data) && len(data) > maxViewBytes-4 {
			data = data[:len(data)-1]
		}
	}
	if !utf8.Valid(data) || strings.ContainsRune(string(data), 0) {
		fv.Binary = true
		return fv
	}
	fv.Text, fv.Truncated = string(data), cut
	return fv
}

// partError is what a part of a page shows when the API refused or
// failed the read behind it; a failure other than the API's is logged.
func (c *Console) partError(r *http.Request, err error) string {
	if msg := pageError(err); msg != genericPartError {
		return msg
	}
	c.log.Error("console page part failed", "path", r.URL.Path, "err", err)
	return genericPartError
}

// cleanRel is a workspace-relative path as the browser names it: no
// leading slash or dot segments ("" for the root).
func cleanRel(p string) string {
	p = path.Clean("/" + p)
	return strings.TrimPrefix(p, "/")
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// crumbs are the links from the root to dir.
func crumbs(dir string) []crumb {
	out := []crumb{{Name: "workspace", Path: ""}}
	if dir == "" {
		return out
	}
	parts := strings.Split(dir, "/")
	for i, p := range parts {
		out = append(out, crumb{Name: p, Path: strings.Join(parts[:i+1], "/")})
	}
	return out
}

// opOf reads a trajectory record: the command of an exec (or the path
// of a file operation), its exit code and output (redacted by the
// service before it was recorded).
func opOf(op workspaces.OpRecord) opView {
	ov := opView{Seq: op.Seq, Kind: op.Kind, DurationMs: op.DurationMs, Error: op.Error}
	if !op.StartedAt.IsZero() {
		ov.Started = op.StartedAt.UTC().Format("2006-01-02 15:04:05Z")
	}
	var req struct {
		workspaces.ExecRequest
		Path string `json:"path"`
	}
	if json.Unmarshal(op.Request, &req) == nil {
		switch {
		case req.Command != "":
			ov.Command = req.Command
		case len(req.Argv) > 0:
			ov.Command = shellJoin(req.Argv)
		case req.Path != "":
			ov.Command = req.Path
		}
	}
	var res workspaces.ExecResult
	if len(op.Result) > 0 && json.Unmarshal(op.Result, &res) == nil && strings.Contains(string(op.Result), `"exitCode"`) {
		ov.Exited, ov.ExitCode, ov.Signal = true, res.ExitCode, res.Signal
		switch {
		case strings.HasPrefix(op.Kind, "file."):
			// A file operation's output is the file or listing itself.
		case res.OutputEncoding == workspaces.EncodingBase64:
			ov.Output = "(binary output, base64)"
		default:
			ov.Output = strings.TrimRight(res.Stdout+res.Stderr, "\n")
		}
	}
	return ov
}

// shellJoin shows argv as one would type it.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
