package httpapi

import (
	"errors"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/errdefs"
)

// Browser sessions: a person signs in at /login with the owner credential
// or an API key and gets a session cookie (HttpOnly, SameSite=Strict,
// Secure over TLS) that stands for that principal on every route: the
// owner, or the key with its grants and project environment. Sessions are
// rows of the database (apikeys.Sessions), so they survive a restart and
// work on every replica. A request authenticated by the cookie that could
// change something (any method but GET and HEAD) must also carry the
// header CSRFHeader: 1, which a cross-site form or image cannot send, and
// an Origin (or, without one, a Referer or Sec-Fetch-Site) of this server.
// /dev/login and /dev/logout are aliases of /login and /logout.

// SessionCookie is the name of the session cookie.
const SessionCookie = "helmr_session"

// CSRFHeader must accompany cookie-authenticated requests that are not
// GET or HEAD.
const CSRFHeader = "X-Helmr-CSRF"

// loginCSP is the sign-in page's Content-Security-Policy: no script, no
// style, forms to this server only.
const loginCSP = "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Helmr: sign in</title></head>
<body><main>
<h1>Helmr</h1>
{{if .Who}}<p>Signed in as {{.Who}} until {{.Until}}.</p>
<form method="post" action="/logout"><button type="submit">Sign out</button></form>
{{else}}{{if .Failed}}<p role="alert">That is neither this server's owner credential nor a valid API key.</p>{{end}}
{{if .Limited}}<p role="alert">Too many failed sign-ins from this address: wait a few minutes.</p>{{end}}
<form method="post" action="/login">
<input type="hidden" name="next" value="{{.Next}}">
<p><label for="credential">Owner credential (<code>owner.token</code> in <code>helmr dev</code>'s data dir) or an API key</label><br>
<input type="password" id="credential" name="credential" size="60" autocomplete="off" autofocus required></p>
<p><button type="submit">Sign in</button></p>
</form>{{end}}
</main></body></html>
`))

func (s *Server) sessions() (*apikeys.Sessions, error) {
	if s.cfg.Sessions == nil {
		return nil, errdefs.NotFoundf("this control plane has no browser sessions")
	}
	return s.cfg.Sessions, nil
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.sessions()
	if err != nil {
		return err
	}
	var data struct {
		Who, Until, Next string
		Failed, Limited  bool
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		if info, err := ss.Authenticate(r.Context(), c.Value); err == nil {
			data.Who = info.Principal.String()
			if info.Key != nil && info.Key.Name != "" {
				data.Who += " (" + info.Key.Name + ")"
			}
			data.Until = info.ExpiresAt.Local().Format(time.DateTime)
		}
	}
	q := r.URL.Query()
	data.Failed, data.Limited, data.Next = q.Get("failed") == "1", q.Get("limited") == "1", localPath(q.Get("next"))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", loginCSP)
	w.Header().Set("X-Frame-Options", "DENY")
	return loginPage.Execute(w, data)
}

// login takes the owner credential or an API key from a form field
// (never the query) and starts a session. A form post that fails goes
// back to the form; any other answers 401. Failures are rate-limited per
// client address.
func (s *Server) login(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.sessions()
	if err != nil {
		return err
	}
	if err := sameOrigin(r, false); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		return errdefs.Invalidf("the body must be a form with the field credential")
	}
	if !r.PostForm.Has("credential") {
		// Not a sign-in attempt: no credential field at all.
		return errdefs.Invalidf("the body must be a form with the field credential")
	}
	client := clientAddr(r)
	if wait := s.logins.blocked(client); wait > 0 {
		if isForm(r) {
			http.Redirect(w, r, "/login?limited=1", http.StatusSeeOther)
			return nil
		}
		w.Header().Set("Retry-After", retryAfter(wait))
		return &Error{Status: http.StatusTooManyRequests, Code: "too_many_requests",
			Message: "too many failed sign-ins from this address: try again later"}
	}
	next := localPath(r.PostForm.Get("next"))
	tok, info, err := ss.Login(r.Context(), r.PostForm.Get("credential"))
	if errors.Is(err, errdefs.ErrUnauthenticated) {
		s.logins.failed(client)
		s.log.Info("sign-in refused", "client", client)
		if isForm(r) {
			to := "/login?failed=1"
			if next != "" {
				to += "&next=" + url.QueryEscape(next)
			}
			http.Redirect(w, r, to, http.StatusSeeOther)
			return nil
		}
		return errdefs.Unauthenticatedf("sign in with the owner credential or an API key")
	}
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: tok, Path: "/", Expires: info.ExpiresAt, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	if next == "" {
		next = "/login"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

// logout ends the cookie's session (deleting its row, so every replica
// forgets it) and clears the cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	ss, err := s.sessions()
	if err != nil {
		return err
	}
	if err := sameOrigin(r, false); err != nil {
		return err
	}
	if c, err := r.Cookie(SessionCookie); err == nil {
		if err := ss.Logout(r.Context(), c.Value); err != nil {
			return err
		}
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

func isForm(r *http.Request) bool {
	return r.Header.Get("Content-Type") == "application/x-www-form-urlencoded"
}

// localPath is next if it is a path of this server ("/runs?x=1"), else
// "": never another host ("//evil", "/\evil", "https://evil").
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || len(next) > 512 {
		return ""
	}
	u, err := url.Parse(next)
	if err != nil || u.Host != "" || u.Scheme != "" {
		return ""
	}
	return next
}

// clientAddr is the request's client IP (the peer's: a forwarded header
// is not trusted).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// sessionPrincipal authenticates a request by its session cookie, with
// the CSRF checks for requests that could change something.
func (s *Server) sessionPrincipal(r *http.Request, c *http.Cookie) (apikeys.SessionInfo, error) {
	info, err := s.cfg.Sessions.Authenticate(r.Context(), c.Value)
	if err != nil {
		return apikeys.SessionInfo{}, err
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if r.Header.Get(CSRFHeader) != "1" {
			return apikeys.SessionInfo{}, errdefs.Forbiddenf("a request signed in by session cookie that is not GET or HEAD needs the header %s: 1 (cross-site request forgery check)", CSRFHeader)
		}
		if err := sameOrigin(r, true); err != nil {
			return apikeys.SessionInfo{}, err
		}
	}
	return info, nil
}

// sameOrigin refuses a request that its Origin header, or without one its
// Referer, or without either its Sec-Fetch-Site, says comes from another
// site. With required, a request that says nothing is refused too.
func sameOrigin(r *http.Request, required bool) error {
	from := r.Header.Get("Origin")
	if from == "" {
		from = r.Header.Get("Referer")
	}
	if from != "" {
		u, err := url.Parse(from)
		if err != nil || u.Host != r.Host {
			return errdefs.Forbiddenf("cross-site request from %q refused", truncate(from, 100))
		}
		return nil
	}
	switch site := r.Header.Get("Sec-Fetch-Site"); {
	case site == "same-origin":
		return nil
	case site != "":
		return errdefs.Forbiddenf("cross-site request (Sec-Fetch-Site: %s) refused", truncate(site, 40))
	case required:
		return errdefs.Forbiddenf("a request signed in by session cookie that is not GET or HEAD needs an Origin (or Referer) of this server (cross-site request forgery check)")
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// meResponse is GET /v1/auth/me: who the request's credential is.
type meResponse struct {
	// Kind is "owner" or "apiKey".
	Kind    string          `json:"kind"`
	KeyID   string          `json:"keyId,omitempty"`
	KeyName string          `json:"keyName,omitempty"`
	Project string          `json:"project,omitempty"`
	Env     string          `json:"env,omitempty"`
	Grants  []apikeys.Grant `json:"grants"`
	// KeyExpiresAt is the API key's own expiry, if it has one.
	KeyExpiresAt *time.Time `json:"keyExpiresAt,omitempty"`
	// Session is set when the request came with a session cookie.
	Session *meSession `json:"session,omitempty"`
}

type meSession struct {
	ExpiresAt time.Time `json:"expiresAt"`
}

// me tells a browser (or any client) who it is signed in as: what the
// console shows and which actions it offers.
func (s *Server) me(w http.ResponseWriter, r *http.Request) error {
	p, _ := r.Context().Value(principalKey{}).(apikeys.Principal)
	out := meResponse{Kind: "owner", Grants: apikeys.Grants}
	if !p.Owner {
		out = meResponse{Kind: "apiKey", KeyID: p.KeyID, Project: p.Project, Env: p.Env, Grants: p.Grants}
	}
	var key *apikeys.Key
	if info, ok := r.Context().Value(sessionKey{}).(apikeys.SessionInfo); ok {
		out.Session = &meSession{ExpiresAt: info.ExpiresAt.UTC()}
		key = info.Key
	} else if !p.Owner && s.cfg.APIKeys != nil {
		k, err := s.cfg.APIKeys.Get(r.Context(), p.KeyID)
		if err != nil {
			return err
		}
		key = &k
	}
	if key != nil {
		out.KeyName, out.KeyExpiresAt = key.Name, key.ExpiresAt
	}
	return writeJSON(w, http.StatusOK, out)
}
