// Package deployments holds deployed task projects: immutable, numbered
// versions of a project's bundles and manifest, and the tasks they define.
package deployments

import (
	"context"
	"errors"
	"time"
)

// Deployment is one immutable version of a project's tasks.
type Deployment struct {
	ID        string    `json:"id"`
	Project   string    `json:"project"`
	Env       string    `json:"env"`
	Version   int       `json:"version"`
	Manifest  Manifest  `json:"manifest"`
	CreatedAt time.Time `json:"createdAt"`
	// Files holds the deployment's bundles and copied sources, by path.
	// Only filled by GetDeploymentFiles; API listings omit it.
	Files map[string][]byte `json:"-"`
}

// Task is a task of a deployment, as listed by the API.
type Task struct {
	ID                string       `json:"id"`
	Project           string       `json:"project"`
	Env               string       `json:"env"`
	DeploymentID      string       `json:"deploymentId"`
	DeploymentVersion int          `json:"deploymentVersion"`
	Spec              TaskManifest `json:"spec"`
}

// Store persists deployments. CreateDeployment is atomic: either the
// deployment, its files and its tasks are all stored, or nothing is.
type Store interface {
	// CreateDeployment assigns the next version for (project, env), stores d
	// with its files, and returns it with ID, Version and CreatedAt set.
	CreateDeployment(ctx context.Context, d Deployment) (Deployment, error)
	// GetDeployment returns ErrNotFound for an unknown id. Files are not loaded.
	GetDeployment(ctx context.Context, id string) (Deployment, error)
	// GetDeploymentFiles returns the deployment's files by path.
	GetDeploymentFiles(ctx context.Context, id string) (map[string][]byte, error)
	// ListDeployments returns the deployments of project/env, newest first.
	ListDeployments(ctx context.Context, project, env string, limit int) ([]Deployment, error)
	// CurrentTasks returns the tasks of the latest deployment of project/env,
	// ordered by task ID; an empty list (no error) when nothing is deployed.
	CurrentTasks(ctx context.Context, project, env string) ([]Task, error)
	// GetTask returns the task as the latest deployment of project/env
	// defines it; ErrNotFound when that deployment does not define it, even
	// if an older one did (a task dropped by a deploy can no longer run).
	GetTask(ctx context.Context, project, env, taskID string) (Task, error)
}

// Errors returned by stores and validation.
var (
	ErrNotFound = errors.New("not found")
	ErrInvalid  = errors.New("invalid")
)
