// Package console is Helmr's operator console: server-rendered pages at
// / of the control plane (the API stays under /v1), with small ES modules
// for live updates and actions, every asset embedded in the binary.
//
// Pages get their data from the API in-process (API replays the request's
// credentials on the control plane's own handler), so the console and the
// API share one authorization path and one set of shapes. Templates are
// html/template: user data (payloads, logs, file names) is always text.
// Mutations happen in the browser, by fetch to /v1 with the session
// cookie and the X-Helmr-CSRF header, which the API requires of cookie
// requests that change something. Every response carries a strict
// Content-Security-Policy: no inline script or style.
package console

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"
)

//go:embed assets templates
var files embed.FS

// CSP is the Content-Security-Policy of every console response.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// SignInPath is where a request without a session is sent.
const SignInPath = "/login"

// Console serves the console's pages and assets.
type Console struct {
	api   http.Handler
	log   *slog.Logger
	mux   *http.ServeMux
	pages map[string]*template.Template // parsed at New, read only after
}

// New returns the console over the control plane's API handler.
func New(api http.Handler, log *slog.Logger) *Console {
	c := &Console{api: api, log: log, mux: http.NewServeMux(), pages: map[string]*template.Template{}}
	assets, _ := fs.Sub(files, "assets")
	static := http.StripPrefix("/assets/", http.FileServerFS(assets))
	c.mux.Handle("GET /assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		static.ServeHTTP(w, r)
	}))
	c.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/runs"+query(r), http.StatusSeeOther)
	})
	for _, name := range []string{"error"} {
		c.pages[name] = parse(name)
	}
	for _, p := range append(c.routes(), c.operateRoutes()...) {
		c.pages[p.name] = parse(p.name)
		c.mux.Handle(p.pattern, c.page(p.name, p.h))
	}
	return c
}

// parse parses the layout with page name; the templates are part of the
// binary, so an error is a bug.
func parse(name string) *template.Template {
	return template.Must(template.New("layout").Funcs(funcs).ParseFS(files, "templates/layout.html", "templates/"+name+".html"))
}

// query is r's query string with its "?", or "".
func query(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return ""
	}
	return "?" + r.URL.RawQuery
}

// ServeHTTP implements http.Handler, with the console's security headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	c.mux.ServeHTTP(w, r)
}

// route is a console page: its pattern, its template's name and the
// handler that gathers its data.
type route struct {
	pattern string
	name    string
	h       pageFunc
}

// pageFunc returns a page's data (passed to its template as .Data).
type pageFunc func(r *http.Request, v *View) (any, error)

// View is what every page's template sees besides its data: who is
// signed in, the project environment chosen, where the page is.
type View struct {
	Me      Me
	Project string
	Env     string
	// Envs are the project environments the principal can see (GET
	// /v1/projects), for the layout's selector; empty if unknown.
	Envs  []Environment
	Path  string
	Title string
	Data  any
	req   *http.Request
	c     *Console
}

// Environment is a project environment, as GET /v1/projects lists it.
type Environment struct {
	Project string `json:"project"`
	Env     string `json:"env"`
}

// Me is the signed-in principal, as GET /v1/auth/me answers.
type Me struct {
	Kind    string   `json:"kind"` // owner or apiKey
	Name    string   `json:"keyName"`
	Project string   `json:"project"`
	Env     string   `json:"env"`
	Grants  []string `json:"grants"`
	Owner   bool     `json:"-"`
}

// Can reports whether the signed-in principal holds grant.
func (m Me) Can(grant string) bool {
	if m.Owner {
		return true
	}
	for _, g := range m.Grants {
		if g == grant {
			return true
		}
	}
	return false
}

// APIError is an error answer of the API.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// Get reads path of the API, as the request's principal, into out.
func (v *View) Get(path string, out any) error { return v.c.get(v.req, path, out) }

// get sends GET path to the API in-process with r's credentials and
// decodes the JSON answer into out.
func (c *Console) get(r *http.Request, path string, out any) error {
	req := httptest.NewRequestWithContext(r.Context(), "GET", path, nil)
	for _, h := range []string{"Cookie", "Authorization"} {
		if v := r.Header.Get(h); v != "" {
			req.Header.Set(h, v)
		}
	}
	req.RemoteAddr = r.RemoteAddr
	rec := httptest.NewRecorder()
	c.api.ServeHTTP(rec, req)
	if rec.Code >= 300 {
		var body struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &body)
		return &APIError{Status: rec.Code, Code: body.Error.Code, Message: body.Error.Message}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(rec.Body.Bytes(), out)
}

// page runs a page's handler and renders its template in the layout: a
// request the API does not know sends the browser to sign in.
func (c *Console) page(name string, h pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := &View{Path: r.URL.Path, req: r, c: c, Project: r.URL.Query().Get("project"), Env: r.URL.Query().Get("env")}
		if err := c.get(r, "/v1/auth/me", &v.Me); err != nil {
			var ae *APIError
			switch {
			case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
				http.Redirect(w, r, SignInPath+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			default:
				c.fail(w, r, v, err)
				return
			}
		}
		v.Me.Owner = v.Me.Kind == "owner"
		if pe := r.URL.Query().Get("scope"); pe != "" {
			// The layout's selector: project/env, kept as two parameters.
			q := r.URL.Query()
			q.Del("scope")
			q.Del("cursor")
			p, e, _ := strings.Cut(pe, "/")
			q.Set("project", p)
			q.Set("env", e)
			http.Redirect(w, r, r.URL.Path+"?"+q.Encode(), http.StatusSeeOther)
			return
		}
		var envs struct {
			Environments []Environment `json:"environments"`
		}
		if err := c.get(r, "/v1/projects", &envs); err == nil {
			v.Envs = envs.Environments
		}
		if v.Project == "" {
			v.Project = v.Me.Project
		}
		if v.Project == "" && len(v.Envs) > 0 {
			v.Project, v.Env = v.Envs[0].Project, v.Envs[0].Env
		}
		if v.Env == "" {
			v.Env = v.Me.Env
		}
		if v.Env == "" {
			v.Env = "dev"
		}
		data, err := h(r, v)
		if err != nil {
			c.fail(w, r, v, err)
			return
		}
		v.Data = data
		if f := r.Header.Get(FragmentHeader); f != "" {
			c.fragment(w, name, f, v)
			return
		}
		c.render(w, http.StatusOK, name, v)
	})
}

// fail renders an error page for err (an API error keeps its status).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, v *View, err error) {
	status := http.StatusInternalServerError
	msg := "internal error"
	var ae *APIError
	if errors.As(err, &ae) {
		status, msg = ae.Status, ae.Message
	} else {
		c.log.Error("console page failed", "path", r.URL.Path, "err", err)
	}
	v.Title, v.Data = http.StatusText(status), msg
	c.render(w, status, "error", v)
}

// render executes page name in the layout; it renders into a buffer so
// a template error never leaves half a page.
func (c *Console) render(w http.ResponseWriter, status int, name string, v *View) {
	var buf bytes.Buffer
	err := c.pages[name].ExecuteTemplate(&buf, "layout", v)
	if err != nil {
		c.log.Error("render a console page", "page", name, "err", err)
		http.Error(w, "the console could not render this page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// FragmentHeader asks a page for one of its templates alone (a live
// list's rows, say) instead of the whole page: the console's scripts
// swap it in.
const FragmentHeader = "X-Helmr-Fragment"

// fragment executes template frag of page name alone; a template the
// page lacks is a 404.
func (c *Console) fragment(w http.ResponseWriter, name, frag string, v *View) {
	t := c.pages[name].Lookup(frag)
	if t == nil || frag == "layout" {
		http.Error(w, "no such fragment", http.StatusNotFound)
		return
	}
	var buf bytes.Buffer
	if err := t.Execute(&buf, v); err != nil {
		c.log.Error("render a console fragment", "page", name, "fragment", frag, "err", err)
		http.Error(w, "the console could not render this fragment", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"json": func(v any) string {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(b)
	},
	"rawjson": func(v json.RawMessage) string {
		var buf bytes.Buffer
		if err := json.Indent(&buf, v, "", "  "); err != nil {
			return string(v)
		}
		return buf.String()
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := time.Since(t).Round(time.Second)
		switch {
		case d < time.Minute:
			return fmt.Sprintf("%ds ago", int(d.Seconds()))
		case d < time.Hour:
			return fmt.Sprintf("%dm ago", int(d.Minutes()))
		case d < 48*time.Hour:
			return fmt.Sprintf("%dh ago", int(d.Hours()))
		}
		return t.Format("2006-01-02")
	},
	"stamp": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"lower": strings.ToLower,
	// duration is how long a run ran (until now if it still runs).
	"duration": func(start, end *time.Time) string {
		if start == nil {
			return ""
		}
		stop := time.Now()
		if end != nil {
			stop = *end
		}
		d := stop.Sub(*start)
		switch {
		case d < time.Second:
			return fmt.Sprintf("%dms", d.Milliseconds())
		case d < time.Minute:
			return fmt.Sprintf("%.1fs", d.Seconds())
		}
		return d.Round(time.Second).String()
	},
	"list": func(s ...string) []string { return s },
	// setq returns the page's path with query parameter k set to val
	// (kept: project and env), for filter and pagination links.
	"setq": func(v *View, kv ...string) string {
		q := v.req.URL.Query()
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				q.Del(kv[i])
			} else {
				q.Set(kv[i], kv[i+1])
			}
		}
		if s := q.Encode(); s != "" {
			return v.Path + "?" + s
		}
		return v.Path
	},
	// scope is "?project=…&env=…" of the view, for links to other pages.
	"scope": func(v *View) string {
		q := url.Values{}
		if v.Project != "" {
			q.Set("project", v.Project)
		}
		if v.Env != "" {
			q.Set("env", v.Env)
		}
		if s := q.Encode(); s != "" {
			return "?" + s
		}
		return ""
	},
}
