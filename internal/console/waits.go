package console

import (
	"net/http"
	"net/url"
	"strings"
)

// waitsData is a page of waitpoints (the approvals inbox, the tokens).
type waitsData struct {
	Waits  []waitpoint
	Next   string
	Status string
	Tag    string
	Kind   string
}

// listWaits reads a page of the view's project environment's
// waitpoints, with the filters of q among keys.
func listWaits(v *View, q url.Values, fixed url.Values) (waitsData, error) {
	d := waitsData{Status: q.Get("status"), Tag: strings.TrimSpace(q.Get("tag")), Kind: q.Get("kind")}
	api := url.Values{"project": {v.Project}, "env": {v.Env}, "limit": {"50"}}
	for k, val := range map[string]string{"status": d.Status, "tag": d.Tag, "kind": d.Kind, "cursor": q.Get("cursor")} {
		if val != "" {
			api.Set(k, val)
		}
	}
	for k := range fixed {
		api.Set(k, fixed.Get(k))
	}
	var page struct {
		Waitpoints []waitpoint `json:"waitpoints"`
		NextCursor string      `json:"nextCursor"`
	}
	if err := v.Get("/v1/tokens?"+api.Encode(), &page); err != nil {
		return d, err
	}
	d.Waits, d.Next = page.Waitpoints, page.NextCursor
	return d, nil
}

// approvalsPage is the inbox: every human wait of the project
// environment still waiting for an answer, newest first.
func (c *Console) approvalsPage(r *http.Request, v *View) (any, error) {
	v.Title = "Approvals"
	if v.Project == "" {
		return waitsData{}, nil
	}
	return listWaits(v, url.Values{"cursor": {r.URL.Query().Get("cursor")}},
		url.Values{"kind": {"human"}, "status": {"WAITING"}})
}

// tokensPage lists the waitpoints (tokens, human waits, timers) of the
// project environment, filtered by status, kind and tag.
func (c *Console) tokensPage(r *http.Request, v *View) (any, error) {
	v.Title = "Tokens"
	if v.Project == "" {
		return waitsData{}, nil
	}
	return listWaits(v, r.URL.Query(), nil)
}
