package console

import (
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

func (c *Console) routes() []route {
	return []route{
		{"GET /runs", "runs", c.runsPage},
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
}

// runsPage is the runs of the chosen project environment, newest first,
// filtered and paged as GET /v1/runs is.
func (c *Console) runsPage(r *http.Request, v *View) (any, error) {
	v.Title = "Runs"
	q := r.URL.Query()
	d := runsData{Status: q.Get("status"), Task: q.Get("task"), Kind: q.Get("kind")}
	if v.Project == "" {
		return d, nil
	}
	api := url.Values{"project": {v.Project}, "env": {v.Env}, "limit": {"50"}}
	for _, k := range []string{"status", "task", "kind", "cursor"} {
		if q.Get(k) != "" {
			api.Set(k, q.Get(k))
		}
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
