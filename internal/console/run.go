package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"time"
)

// largeJSON is the size (pretty-printed) above which a payload, output
// or metadata value is collapsed on the run page.
const largeJSON = 2048

// runView is a run as GET /v1/runs/{id} answers it.
type runView struct {
	ID                string                     `json:"id"`
	Kind              string                     `json:"kind"`
	Project           string                     `json:"project"`
	Env               string                     `json:"env"`
	TaskID            string                     `json:"taskId"`
	DeploymentID      string                     `json:"deploymentId"`
	DeploymentVersion int                        `json:"deploymentVersion"`
	Status            string                     `json:"status"`
	Payload           json.RawMessage            `json:"payload"`
	Output            json.RawMessage            `json:"output"`
	Error             *runError                  `json:"error"`
	IdempotencyKey    string                     `json:"idempotencyKey"`
	Secrets           map[string]string          `json:"secrets"`
	WorkspaceID       string                     `json:"workspaceId"`
	WorkerID          string                     `json:"workerId"`
	Tier              string                     `json:"tier"`
	MaxDurationSec    int                        `json:"maxDuration"`
	ReplayOf          string                     `json:"replayOf"`
	CreatedAt         time.Time                  `json:"createdAt"`
	StartedAt         *time.Time                 `json:"startedAt"`
	FinishedAt        *time.Time                 `json:"finishedAt"`
	LastSeq           int64                      `json:"lastSeq"`
	Metadata          map[string]json.RawMessage `json:"metadata"`
	WaitingOn         []waitpoint                `json:"waitingOn"`
	Queue             string                     `json:"queue"`
	ConcurrencyKey    string                     `json:"concurrencyKey"`
	Priority          int                        `json:"priority"`
	Tags              []string                   `json:"tags"`
	AvailableAt       *time.Time                 `json:"availableAt"`
	ExpiresAt         *time.Time                 `json:"expiresAt"`
	Attempt           int                        `json:"attempt"`
	Retry             *struct {
		MaxAttempts int `json:"maxAttempts"`
	} `json:"retry"`
	Attempts []struct {
		Attempt  int       `json:"attempt"`
		Status   string    `json:"status"`
		Error    *runError `json:"error"`
		WorkerID string    `json:"workerId"`
	} `json:"attempts"`
}

// runError is a failed run's error.
type runError struct {
	Class   string `json:"class"`
	Message string `json:"message"`
	Stack   string `json:"stack"`
}

// waitpoint is a token, human wait or timer as the API shows it.
type waitpoint struct {
	ID          string          `json:"id"`
	RunID       string          `json:"runId"`
	Kind        string          `json:"kind"`
	Status      string          `json:"status"`
	DisplayText string          `json:"displayText"`
	Schema      json.RawMessage `json:"schema"`
	Tags        []string        `json:"tags"`
	TimeoutAt   *time.Time      `json:"timeoutAt"`
	Data        json.RawMessage `json:"data"`
	Reason      string          `json:"reason"`
	CreatedAt   time.Time       `json:"createdAt"`
	WaitedAt    *time.Time      `json:"waitedAt"`
	CompletedAt *time.Time      `json:"completedAt"`
}

// Terminal reports whether the run has finished.
func (r runView) Terminal() bool {
	switch r.Status {
	case "COMPLETED", "FAILED", "TIMED_OUT", "CANCELED", "EXPIRED":
		return true
	}
	return false
}

// prettyJSON is a JSON value indented for reading, and whether it is
// large enough to collapse.
type prettyJSON struct {
	Text  string
	Large bool
}

func pretty(v json.RawMessage) prettyJSON {
	if len(v) == 0 {
		return prettyJSON{}
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, v, "", "  "); err != nil {
		return prettyJSON{Text: string(v), Large: len(v) > largeJSON}
	}
	text := string(unescapeHTML(buf.Bytes()))
	return prettyJSON{Text: text, Large: len(text) > largeJSON}
}

type runData struct {
	Run      runView
	Payload  prettyJSON
	Output   prettyJSON
	Metadata map[string]prettyJSON
	// Raw is the payload as sent back by a replay (compact JSON).
	Raw string
}

// runPage is one run: its state, payload, output, failure, metadata,
// waits and (live, by its script) its timeline and session streams.
func (c *Console) runPage(r *http.Request, v *View) (any, error) {
	var run runView
	if err := v.Get("/v1/runs/"+url.PathEscape(r.PathValue("id")), &run); err != nil {
		return nil, err
	}
	v.Title = "Run " + run.ID
	v.Project, v.Env = run.Project, run.Env
	d := runData{Run: run, Payload: pretty(run.Payload), Output: pretty(run.Output), Raw: string(run.Payload)}
	if len(run.Metadata) > 0 {
		d.Metadata = map[string]prettyJSON{}
		for k, m := range run.Metadata {
			d.Metadata[k] = pretty(m)
		}
	}
	return d, nil
}

// unescapeHTML turns the \u003c, \u003e and \u0026 escapes Go's JSON
// encoder writes for <, > and & back into those characters, so that a
// value reads as it was sent (the template escapes it for HTML). An
// escape preceded by an odd number of backslashes is not one and stays.
func unescapeHTML(b []byte) []byte {
	repl := map[string]byte{`u003c`: '<', `u003e`: '>', `u0026`: '&'}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		if i+5 < len(b) {
			if c, ok := repl[string(b[i+1:i+6])]; ok {
				out = append(out, c)
				i += 5
				continue
			}
		}
		out = append(out, b[i], b[i+1]) // any other escape, \\ included, is kept whole
		i++
	}
	return out
}
