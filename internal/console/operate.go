package console

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
)

// operateRoutes are the pages of deployments, workspaces, secrets, API
// keys and workers.
func (c *Console) operateRoutes() []route {
	return []route{
		{"GET /deployments", "deployments", c.deploymentsPage},
		{"GET /deployments/{id}", "deployment", c.deploymentPage},
		{"GET /workspaces", "workspaces", c.workspacesPage},
		{"GET /workspaces/{id}", "workspace", c.workspacePage},
		{"GET /secrets", "secrets", c.secretsPage},
		{"GET /apikeys", "apikeys", c.apiKeysPage},
		{"GET /workers", "workers", c.workersPage},
	}
}

// scopeQuery is "project=…&env=…" of the view, for API paths.
func scopeQuery(v *View) string {
	return url.Values{"project": {v.Project}, "env": {v.Env}}.Encode()
}

// apiError reads the API's error answer in rec.
func apiError(rec *httptest.ResponseRecorder) error {
	var body struct {
		Error struct{ Code, Message string }
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	return &APIError{Status: rec.Code, Code: body.Error.Code, Message: body.Error.Message}
}

// getRaw reads path of the API as the request's principal, up to max
// bytes: the body, and whether it was longer than max.
func (v *View) getRaw(path string, max int64) ([]byte, bool, error) {
	r := v.req
	req := httptest.NewRequestWithContext(r.Context(), "GET", path, nil)
	for _, h := range []string{"Cookie", "Authorization"} {
		if val := r.Header.Get(h); val != "" {
			req.Header.Set(h, val)
		}
	}
	req.RemoteAddr = r.RemoteAddr
	rec := httptest.NewRecorder()
	v.c.api.ServeHTTP(rec, req)
	if rec.Code >= 300 {
		return nil, false, apiError(rec)
	}
	data, _ := io.ReadAll(io.LimitReader(rec.Body, max+1))
	if int64(len(data)) > max {
		return data[:max], true, nil
	}
	return data, false, nil
}

// pageError is what a part of a page shows when the API refused or
// failed the read behind it: the API's message, or a generic one.
func pageError(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		if ae.Message != "" {
			return ae.Message
		}
		return http.StatusText(ae.Status)
	}
	return genericPartError
}

const genericPartError = "the console could not read this"

func init() {
	// mib shows bytes in MiB.
	funcs["mib"] = func(n int64) int64 { return n >> 20 }
}
