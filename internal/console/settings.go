package console

import (
	"net/http"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/vault"
)

type secretsData struct {
	Secrets []vault.Meta
}

// secretsPage lists the project environment's secrets: names and times,
// never a value (the API has none to give).
func (c *Console) secretsPage(r *http.Request, v *View) (any, error) {
	v.Title = "Secrets"
	var d secretsData
	if v.Project == "" {
		return d, nil
	}
	var page struct {
		Secrets []vault.Meta `json:"secrets"`
	}
	if err := v.Get("/v1/secrets?"+scopeQuery(v), &page); err != nil {
		return nil, err
	}
	d.Secrets = page.Secrets
	return d, nil
}

type apiKeysData struct {
	Keys   []apikeys.Key
	Grants []apikeys.Grant
	Now    time.Time
}

// apiKeysPage lists API keys and worker credentials (the owner's page:
// the API refuses keys).
func (c *Console) apiKeysPage(r *http.Request, v *View) (any, error) {
	v.Title = "API keys"
	var page struct {
		Keys []apikeys.Key `json:"apiKeys"`
	}
	if err := v.Get("/v1/apikeys", &page); err != nil {
		return nil, err
	}
	// Newest first.
	for i, j := 0, len(page.Keys)-1; i < j; i, j = i+1, j-1 {
		page.Keys[i], page.Keys[j] = page.Keys[j], page.Keys[i]
	}
	return apiKeysData{Keys: page.Keys, Grants: apikeys.Grants, Now: time.Now()}, nil
}

// workerView is a worker as GET /v1/workers answers.
type workerView struct {
	ID           string    `json:"id"`
	LastSeen     time.Time `json:"lastSeen"`
	Live         bool      `json:"live"`
	SlotsInUse   int       `json:"slotsInUse"`
	Capabilities struct {
		Arch        string   `json:"arch"`
		Tiers       []string `json:"tiers"`
		Kernel      string   `json:"kernel"`
		CPUs        float64  `json:"cpus"`
		MemoryBytes int64    `json:"memoryBytes"`
		Slots       int      `json:"slots"`
		Digests     []string `json:"digests"`
		Host        string   `json:"host"`
	} `json:"capabilities"`
	Runs []struct {
		ID        string     `json:"id"`
		TaskID    string     `json:"taskId"`
		Status    string     `json:"status"`
		Tier      string     `json:"tier"`
		StartedAt *time.Time `json:"startedAt"`
	} `json:"runs"`
}

// doctorView is GET /v1/doctor's report.
type doctorView struct {
	Tiers []struct {
		Name      string `json:"name"`
		Available bool   `json:"available"`
		Reason    string `json:"reason"`
		Isolation string `json:"isolation"`
	} `json:"tiers"`
	Policy         string      `json:"policy"`
	Selected       string      `json:"selected"`
	Egress         doctorCheck `json:"egress"`
	WorkspaceQuota doctorCheck `json:"workspaceQuota"`
	Error          string      `json:"error"`
}

type doctorCheck struct {
	Policy string `json:"policy"`
	Quota  string `json:"quota"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

type workersData struct {
	Workers   []workerView
	Doctor    *doctorView
	DoctorErr string
}

// workersPage shows the workers (with the runs each holds of the project
// environment) and, to the owner, what helmr doctor says of the control
// plane's host.
func (c *Console) workersPage(r *http.Request, v *View) (any, error) {
	v.Title = "Workers"
	var d workersData
	if v.Project != "" {
		var page struct {
			Workers []workerView `json:"workers"`
		}
		if err := v.Get("/v1/workers?"+scopeQuery(v), &page); err != nil {
			return nil, err
		}
		d.Workers = page.Workers
	}
	if v.Me.Owner {
		var doc doctorView
		if err := v.Get("/v1/doctor", &doc); err != nil {
			d.DoctorErr = c.partError(r, err)
		} else {
			d.Doctor = &doc
		}
	}
	return d, nil
}
