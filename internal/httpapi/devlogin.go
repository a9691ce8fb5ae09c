package httpapi

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/errdefs"
)

// Owner sessions (helmr dev only): a person signs in at /dev/login with the
// owner credential and gets a session cookie (HttpOnly, SameSite=Strict)
// that stands for the owner on every route. A request authenticated by
// the cookie that could change something (any method but GET and HEAD)
// must also carry the header CSRFHeader: 1, which a cross-site form or
// image cannot send, and an Origin, if it has one, of this server.

// SessionCookie is the name of the owner session cookie.
const SessionCookie = "helmr_session"

// CSRFHeader must accompany cookie-authenticated requests that are not
// GET or HEAD.
const CSRFHeader = "X-Helmr-CSRF"

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Helmr dev: sign in</title></head>
<body style="font-family: sans-serif; max-width: 34em; margin: 3em auto">
<h1>Helmr dev</h1>
{{if .Until}}<p>Signed in as the owner until {{.Until}}.</p>
<form method="post" action="/dev/logout"><button>Sign out</button></form>
{{else}}{{if .Failed}}<p style="color: #a00">That is not this helmr dev's owner credential.</p>{{end}}
<form method="post" action="/dev/login">
<p><label>Owner credential (in the data dir's <code>owner.token</code>)<br>
<input type="password" name="credential" size="60" autocomplete="off" autofocus></label></p>
<p><button>Sign in</button></p>
</form>{{end}}
</body></html>
`))

func (s *Server) sessions() (*apikeys.Sessions, error) {
	if s.cfg.Sessions == nil {
		return nil, errdefs.NotFoundf("owner sessions are served by helmr dev only")
	}
	return s.cfg.Sessions, nil
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.sessions()
	if err != nil {
		return err
	}
	var data struct {
		Until  string
		Failed bool
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		if _, exp, err := ss.Authenticate(c.Value); err == nil {
			data.Until = exp.Local().Format(time.DateTime)
		}
	}
	data.Failed = r.URL.Query().Get("failed") == "1"
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	return loginPage.Execute(w, data)
}

// login takes the owner credential from a form field (never the query).
func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.sessions()
	if err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		return errdefs.Invalidf("the body must be a form with the field credential")
	}
	tok, exp, err := ss.Login(r.PostForm.Get("credential"))
	if errors.Is(err, errdefs.ErrUnauthenticated) {
		if isForm(r) {
			http.Redirect(w, r, "/dev/login?failed=1", http.StatusSeeOther)
			return nil
		}
		return errdefs.Unauthenticatedf("only this helmr dev's owner credential signs in")
	}
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: tok, Path: "/", Expires: exp, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	s.log.Info("owner session started", "expires", exp)
	http.Redirect(w, r, "/dev/login", http.StatusSeeOther)
	return nil
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.sessions()
	if err != nil {
		return err
	}
	if err := sameOrigin(r); err != nil {
		return err
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		ss.Logout(c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/dev/login", http.StatusSeeOther)
	return nil
}

func isForm(r *http.Request) bool {
	return r.Header.Get("Content-Type") == "application/x-www-form-urlencoded"
}

// sessionPrincipal authenticates a request by its session cookie, with
// the CSRF checks for requests that could change something.
func (s *Server) sessionPrincipal(r *http.Request, c *http.Cookie) (apikeys.Principal, error) {
	p, _, err := s.cfg.Sessions.Authenticate(c.Value)
	if err != nil {
		return apikeys.Principal{}, err
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if r.Header.Get(CSRFHeader) != "1" {
			return apikeys.Principal{}, errdefs.Forbiddenf("a request signed in by session cookie that is not GET or HEAD needs the header %s: 1 (cross-site request forgery check)", CSRFHeader)
		}
		if err := sameOrigin(r); err != nil {
			return apikeys.Principal{}, err
		}
	}
	return p, nil
}

// sameOrigin refuses a request whose Origin header names another site.
func sameOrigin(r *http.Request) error {
	o := r.Header.Get("Origin")
	if o == "" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || u.Host != r.Host {
		return errdefs.Forbiddenf("cross-site request from %q refused", o)
	}
	return nil
}
