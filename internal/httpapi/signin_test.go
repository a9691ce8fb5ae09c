package httpapi_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/httpapi"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
)

// cookieHeader is the Cookie header of a session cookie.
func cookieHeader(c *http.Cookie) string { return c.Name + "=" + c.Value }

// asSession calls the API with the session cookie c and no bearer
// credential; header adds more (name, value, ...).
func (e *apiEnv) asSession(c *http.Cookie, method, path string, body any, header ...string) (int, map[string]any) {
	e.t.Helper()
	return e.call(method, path, body, append([]string{"Authorization", "", "Cookie", cookieHeader(c)}, header...)...)
}

// replica is a second control plane over the same database file, as a
// restarted or second replica would be: its own store handle, key service
// and sessions, nothing shared in memory with e's server.
func (e *apiEnv) replica(t *testing.T) *httptest.Server {
	t.Helper()
	st, err := sqlite.Open(t.Context(), e.db, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys := apikeys.NewService(st, e.owner, nil)
	svc := runs.NewService(st, st, st, runs.NewBroker(), nil)
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Runs: svc, Deployments: st, APIKeys: keys,
		Sessions: apikeys.NewSessions(st, keys, 0, nil)}))
	t.Cleanup(srv.Close)
	return srv
}

// getWith GETs url with the session cookie c.
func getWith(t *testing.T, c *http.Cookie, u string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Cookie", cookieHeader(c))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestSignInAsOwnerAndKey signs in with the owner credential and with an
// API key; /v1/auth/me tells each who it is, and the key's session has
// the key's grants and scope and no more.
func TestSignInAsOwnerAndKey(t *testing.T) {
	e := newAPI(t)
	f := newAuthFixture(t, e)
	owner := e.login(t, e.owner)
	st, me := e.asSession(owner, "GET", "/v1/auth/me", nil)
	if st != 200 || me["kind"] != "owner" || len(me["grants"].([]any)) != len(apikeys.Grants) || me["session"] == nil {
		t.Errorf("GET /v1/auth/me as the owner's session = %d %v, want the owner with every grant and the session", st, me)
	}

	st, body := e.call("POST", "/v1/apikeys", `{"project": "p", "env": "dev", "name": "viewer", "grants": ["runs:read", "secrets:write"], "expiresIn": "2h"}`)
	if st != http.StatusCreated {
		t.Fatalf("create key = %d %v", st, body)
	}
	key, keyID := body["key"].(string), body["apiKey"].(map[string]any)["id"].(string)
	resp := e.loginResponse(t, key)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/login" {
		t.Errorf("sign in with a key = %d to %q, want 303 to /login", resp.StatusCode, loc)
	}
	c := sessionCookie(t, resp)
	if d := time.Until(c.Expires); d > 2*time.Hour || d < 119*time.Minute {
		t.Errorf("a 2-hour key's session cookie expires in %v, want no later than the key", d)
	}
	st, me = e.asSession(c, "GET", "/v1/auth/me", nil)
	session, _ := me["session"].(map[string]any)
	if st != 200 || me["kind"] != "apiKey" || me["keyId"] != keyID || me["keyName"] != "viewer" || me["project"] != "p" || me["env"] != "dev" ||
		len(me["grants"].([]any)) != 2 || session == nil || me["keyExpiresAt"] == nil {
		t.Errorf("GET /v1/auth/me as the key's session = %d %v, want the key, its scope, grants and the session", st, me)
	}
	if st, me := e.call("GET", "/v1/auth/me", nil, "Authorization", "Bearer "+key); st != 200 || me["keyId"] != keyID || me["session"] != nil {
		t.Errorf("GET /v1/auth/me with the key as bearer = %d %v, want the key and no session", st, me)
	}

	csrf := []string{httpapi.CSRFHeader, "1", "Origin", e.srv.URL}
	for _, tc := range []struct {
		method, path string
		body         any
		headers      []string
		want         int
	}{
		{"GET", "/v1/runs?project=p&env=dev", nil, nil, 200},
		{"GET", "/v1/runs/" + f.runID, nil, nil, 200},
		{"GET", "/v1/runs?project=p&env=prod", nil, nil, 403},                                         // another environment
		{"GET", "/v1/deployments?project=p&env=dev", nil, nil, 403},                                   // lacks tasks:read
		{"POST", "/v1/tasks/a/runs?project=p&env=dev", `{"payload": 1}`, csrf, 403},                   // lacks runs:create
		{"POST", "/v1/apikeys", `{"project": "p", "env": "dev", "grants": ["runs:read"]}`, csrf, 403}, // owner only
		{"PUT", "/v1/secrets/FROM_SESSION?project=p&env=dev", `{"value": "v"}`, csrf, 200},            // holds secrets:write
	} {
		if st, resp := e.asSession(c, tc.method, tc.path, tc.body, tc.headers...); st != tc.want {
			t.Errorf("%s %s in the key's session = %d %v, want %d", tc.method, tc.path, st, resp, tc.want)
		}
	}
}

// TestSignInRefused: wrong credentials, a worker credential, a sign-in
// from another origin, and an open redirect are refused; failed sign-ins
// are limited per client.
func TestSignInRefused(t *testing.T) {
	e := newAPI(t)
	st, wc := e.call("POST", "/v1/apikeys/worker", `{"name": "w"}`)
	if st != http.StatusCreated {
		t.Fatalf("create worker credential = %d %v", st, wc)
	}
	for name, cred := range map[string]string{"a wrong credential": "nope", "a worker credential": wc["key"].(string)} {
		resp := e.loginResponse(t, cred)
		if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "failed=1") || len(resp.Cookies()) != 0 {
			t.Errorf("sign in with %s = %d %v, want back to the form without a session", name, resp.StatusCode, resp.Header)
		}
	}
	if st, page := e.page(t, "/login?failed=1", nil); st != 200 || !strings.Contains(page, `role="alert"`) {
		t.Errorf("GET /login?failed=1 = %d, want the form saying it failed:\n%s", st, page)
	}

	req, _ := http.NewRequest("POST", e.srv.URL+"/login", strings.NewReader(url.Values{"credential": {e.owner}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	resp, err := noRedirect.Do(req)
	if err != nil || resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("sign in from another origin = %v, %v; want 403 without a session", resp.StatusCode, err)
	}

	for next, want := range map[string]string{"/runs?status=FAILED": "/runs?status=FAILED", "//evil.example/x": "/login",
		"https://evil.example/": "/login", `/\evil.example`: "/login"} {
		resp, err := noRedirect.PostForm(e.srv.URL+"/login", url.Values{"credential": {e.owner}, "next": {next}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); loc != want {
			t.Errorf("sign in with next=%q goes to %q, want %q", next, loc, want)
		}
	}

	// Two failures above; eight more make ten, and then even the right
	// credential waits.
	for range 8 {
		e.loginResponse(t, "nope")
	}
	st, body := e.call("POST", "/login", url.Values{"credential": {e.owner}}.Encode(), "Authorization", "", "Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	if st != http.StatusTooManyRequests {
		t.Errorf("sign in after ten failures = %d %v, want 429", st, body)
	}
	if resp := e.loginResponse(t, e.owner); resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "limited=1") || len(resp.Cookies()) != 0 {
		t.Errorf("sign in with the form after ten failures = %d %v, want back to the form, no session", resp.StatusCode, resp.Header)
	}
}

// TestSessionSurvivesRestartAndReplicas: a session started on one
// server is good on another over the same database (a restart, or a
// second replica), and signing out on either ends it on both.
func TestSessionSurvivesRestartAndReplicas(t *testing.T) {
	e := newAPI(t)
	c := e.login(t, e.owner)
	other := e.replica(t)
	if st := getWith(t, c, other.URL+"/v1/runs?project=p"); st != 200 {
		t.Fatalf("list runs on another server with the session = %d, want 200", st)
	}
	req, _ := http.NewRequest("POST", other.URL+"/logout", nil)
	req.Header.Set("Cookie", cookieHeader(c))
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := noRedirect.Do(req)
	if err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign out on the other server = %v, %v", resp.StatusCode, err)
	}
	for name, u := range map[string]string{"this server": e.srv.URL, "the other": other.URL} {
		if st := getWith(t, c, u+"/v1/runs?project=p"); st != http.StatusUnauthorized {
			t.Errorf("list runs on %s after signing out = %d, want 401", name, st)
		}
	}
}

// TestRevokedKeyEndsItsSessions: revoking a key ends its sessions at
// once, on this server and on another replica.
func TestRevokedKeyEndsItsSessions(t *testing.T) {
	e := newAPI(t)
	key, id := e.key("p", "dev", apikeys.RunsRead)
	c := e.login(t, key)
	other := e.replica(t)
	for _, u := range []string{e.srv.URL, other.URL} {
		if st := getWith(t, c, u+"/v1/runs?project=p"); st != 200 {
			t.Fatalf("list runs in the key's session = %d, want 200", st)
		}
	}
	if st, body := e.call("POST", "/v1/apikeys/"+id+"/revoke", nil); st != 200 {
		t.Fatalf("revoke = %d %v", st, body)
	}
	for name, u := range map[string]string{"this server": e.srv.URL, "the other": other.URL} {
		if st := getWith(t, c, u+"/v1/runs?project=p"); st != http.StatusUnauthorized {
			t.Errorf("list runs on %s in the session of a revoked key = %d, want 401", name, st)
		}
	}
}

// TestSessionExpiry: a session ends at its expiry (a clock the test
// moves), and a sign-in sweeps the rows of expired sessions.
func TestSessionExpiry(t *testing.T) {
	e := newAPI(t)
	now := time.Now()
	e.sessions.Now = func() time.Time { return now }
	c := e.login(t, e.owner)
	now = now.Add(apikeys.DefaultSessionTTL - time.Second)
	if st, body := e.asSession(c, "GET", "/v1/runs?project=p", nil); st != 200 {
		t.Fatalf("list runs a second before the session expires = %d %v, want 200", st, body)
	}
	now = now.Add(time.Second)
	if st, body := e.asSession(c, "GET", "/v1/runs?project=p", nil); st != http.StatusUnauthorized || !strings.Contains(body["error"].(map[string]any)["message"].(string), "expired") {
		t.Errorf("list runs when the session expires = %d %v, want 401 saying it expired", st, body)
	}
	if st, page := e.page(t, "/login", []string{"Cookie", cookieHeader(c)}); st != 200 || !strings.Contains(page, `name="credential"`) {
		t.Errorf("GET /login with an expired session = %d, want the form:\n%s", st, page)
	}
	stale := e.login(t, e.owner)
	now = now.Add(apikeys.DefaultSessionTTL)
	e.login(t, e.owner)
	if _, err := e.st.GetSession(t.Context(), apikeys.SessionID(stale.Value)); err == nil {
		t.Errorf("an expired session's row outlived a later sign-in: want it swept")
	}
}

// TestSessionCSRF: a cookie-authenticated change needs the CSRF header
// and an origin of this server; reads need neither; a bearer credential
// needs neither.
func TestSessionCSRF(t *testing.T) {
	e := newAPI(t)
	c := e.login(t, e.owner)
	put := func(header ...string) (int, map[string]any) {
		return e.asSession(c, "PUT", "/v1/secrets/CSRF?project=p", `{"value": "v"}`, header...)
	}
	for _, tc := range []struct {
		name   string
		header []string
		want   int
	}{
		{"no CSRF header", []string{"Origin", e.srv.URL}, 403},
		{"CSRF header 0", []string{httpapi.CSRFHeader, "0", "Origin", e.srv.URL}, 403},
		{"a foreign Origin", []string{httpapi.CSRFHeader, "1", "Origin", "http://evil.example"}, 403},
		{"a foreign Referer", []string{httpapi.CSRFHeader, "1", "Referer", "http://evil.example/page"}, 403},
		{"a cross-site fetch", []string{httpapi.CSRFHeader, "1", "Sec-Fetch-Site", "cross-site"}, 403},
		{"no origin at all", []string{httpapi.CSRFHeader, "1"}, 403},
		{"same Origin", []string{httpapi.CSRFHeader, "1", "Origin", e.srv.URL}, 200},
		{"same Referer", []string{httpapi.CSRFHeader, "1", "Referer", e.srv.URL + "/secrets"}, 200},
		{"a same-origin fetch", []string{httpapi.CSRFHeader, "1", "Sec-Fetch-Site", "same-origin"}, 200},
	} {
		st, body := put(tc.header...)
		if st != tc.want {
			t.Errorf("PUT a secret in the session with %s = %d %v, want %d", tc.name, st, body, tc.want)
		}
		if st == 403 && !strings.Contains(body["error"].(map[string]any)["message"].(string), "cross-site") {
			t.Errorf("PUT a secret in the session with %s: message %v, want it to say why (cross-site)", tc.name, body)
		}
	}
	if st, body := e.asSession(c, "GET", "/v1/secrets?project=p", nil); st != 200 {
		t.Errorf("GET secrets in the session without the CSRF header = %d %v, want 200", st, body)
	}
	if st, body := e.call("PUT", "/v1/secrets/CSRF?project=p", `{"value": "v"}`); st != 200 {
		t.Errorf("PUT a secret with the owner as bearer = %d %v, want 200 (no CSRF check)", st, body)
	}
}

// TestSessionCookieSecureOverTLS: over TLS the cookie is Secure.
func TestSessionCookieSecureOverTLS(t *testing.T) {
	e := newAPI(t)
	srv := httptest.NewTLSServer(e.srv.Config.Handler)
	defer srv.Close()
	client := srv.Client()
	client.CheckRedirect = noRedirect.CheckRedirect
	resp, err := client.PostForm(srv.URL+"/login", url.Values{"credential": {e.owner}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if c := sessionCookie(t, resp); !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("session cookie over TLS = %+v, want Secure, HttpOnly, SameSite=Strict", c)
	}
}

// TestUndeclaredMethods: a method a route does not take is a 405 naming
// the ones it does, under /v1 and at the sign-in page, not the console's
// 404; a path no route serves stays a 404.
func TestUndeclaredMethods(t *testing.T) {
	e := newAPI(t)
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"TRACE", "/v1/runs", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"DELETE", "/v1/health", http.StatusMethodNotAllowed, "GET, HEAD"},
		{"TRACE", "/login", http.StatusMethodNotAllowed, "GET, HEAD, POST"},
		{"GET", "/v1/nothing-here", http.StatusNotFound, ""},
	} {
		req, _ := http.NewRequest(c.method, e.srv.URL+c.path, nil)
		req.Header.Set("Authorization", "Bearer "+e.owner)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s = %d Allow %q, want %d Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), c.status, c.allow)
		}
	}
	// A sign-in with no credential field is a bad request, not a failed
	// sign-in sent back to the form.
	req, _ := http.NewRequest("POST", e.srv.URL+"/login", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("POST /login without a credential = %d, want 400", resp.StatusCode)
	}
}
