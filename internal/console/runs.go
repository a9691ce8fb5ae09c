package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

func (c *Console) routes() []route {
	return []route{
		{"GET /runs", "runs", c.runsPage},
		{"GET /runs/{id}", "run", c.runPage},
		{"GET /approvals", "approvals", c.approvalsPage},
		{"GET /tokens", "tokens", c.tokensPage},
		{"GET /test", "test", c.testPage},
	}
}

// runSummary is a run as the runs list shows it (GET /v1/runs).
type runSummary struct {
	ID          string          `json:"id"`
	TaskID      string          `json:"taskId"`
	Kind        string          `json:"kind"`
	Status      string          `json:"status"`
	CreatedAt   time.Time       `json:"createdAt"`
	StartedAt   *time.Time      `json:"startedAt"`
	FinishedAt  *time.Time      `json:"finishedAt"`
	WorkspaceID string          `json:"workspaceId"`
	Error       json.RawMessage `json:"error"`
}

type runsData struct {
	Runs   []runSummary
	Next   string
	Status string
	Task   string
	Kind   string
	Window string // one of windows' keys, or ""
	ID     string // id search (a prefix)
	// Live is true on the first page: the list refreshes itself.
	Live bool
}

// windows are the runs list's time windows: runs created within the
// last d.
var windows = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour}

// runsPage is the runs of the chosen project environment, newest first,
// filtered and paged as GET /v1/runs is.
func (c *Console) runsPage(r *http.Request, v *View) (any, error) {
	v.Title = "Runs"
	q := r.URL.Query()
	d := runsData{Status: q.Get("status"), Task: q.Get("task"), Kind: q.Get("kind"), Window: q.Get("window"),
		ID: strings.TrimSpace(q.Get("id")), Live: q.Get("cursor") == ""}
	if v.Project == "" {
		return d, nil
	}
	api := url.Values{"project": {v.Project}, "env": {v.Env}, "limit": {"50"}}
	for _, k := range []string{"status", "task", "kind", "cursor"} {
		if q.Get(k) != "" {
			api.Set(k, q.Get(k))
		}
	}
	if d.ID != "" {
		api.Set("id", d.ID)
	}
	if d.Window != "" {
		w, ok := windows[d.Window]
		if !ok {
			return nil, &APIError{Status: http.StatusBadRequest, Code: "invalid", Message: "unknown time window " + strconv.Quote(d.Window) + " (1h, 24h, 7d or 30d)"}
		}
		api.Set("since", time.Now().Add(-w).UTC().Format(time.RFC3339))
	}
	var page struct {
		Runs       []runSummary `json:"runs"`
		NextCursor string       `json:"nextCursor"`
	}
	if err := v.Get("/v1/runs?"+api.Encode(), &page); err != nil {
		return nil, err
	}
	d.Runs, d.Next = page.Runs, page.NextCursor
	return d, nil
}
