// Package deployments holds deployed task projects: immutable, numbered
// versions of a project's bundles and manifest, and the tasks they define.
package deployments

import (
	"context"
	"encoding/json"
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
	// Status is READY, BUILDING or FAILED: a deployment with a build run
	// (helmr deploy builds its images ahead of time) follows that run, and
	// only a READY deployment's tasks can run.
	Status Status `json:"status"`
	// BuildRunID is the run that builds the deployment's images; empty when
	// images are built on the worker at a task's first run instead.
	BuildRunID string `json:"buildRunId,omitempty"`
	// BuildError says why the build failed (Status FAILED).
	BuildError string `json:"buildError,omitempty"`
	// Images are the images the build made, by task ID.
	Images map[string]ImageBuild `json:"images,omitempty"`
	// Files holds the deployment's bundles and copied sources, by path.
	// Only filled by GetDeploymentFiles; API listings omit it.
	Files map[string][]byte `json:"-"`
}

// Status is a deployment's state.
type Status string

// Deployment states.
const (
	StatusReady    Status = "READY"
	StatusBuilding Status = "BUILDING"
	StatusFailed   Status = "FAILED"
)

// ImageBuild is a task's image as built at deploy.
type ImageBuild struct {
	Name string `json:"name"`
	// Digest identifies the image: its base's digest and the chain of its
	// steps' inputs. A worker that prepares the image again checks it gets
	// this digest.
	Digest string `json:"digest"`
	// Base is the from(...) reference and BaseDigest the digest it resolved
	// to (a built-in base's content digest, a registry image's manifest).
	Base       string `json:"base"`
	BaseDigest string `json:"baseDigest"`
}

// BuildOutput is what a completed build run outputs.
type BuildOutput struct {
	Images map[string]ImageBuild `json:"images"`
}

// Task is a task of a deployment, as listed by the API.
type Task struct {
	ID                string       `json:"id"`
	Project           string       `json:"project"`
	Env               string       `json:"env"`
	DeploymentID      string       `json:"deploymentId"`
	DeploymentVersion int          `json:"deploymentVersion"`
	Spec              TaskManifest `json:"spec"`
	// Image is the task's image as built at deploy (nil: built on the
	// worker at the first run).
	Image *ImageBuild `json:"image,omitempty"`
}

// TaskImage reads a task's image from a completed build run's output; nil
// without one.
func TaskImage(output, taskID string) *ImageBuild {
	var out BuildOutput
	if output == "" || json.Unmarshal([]byte(output), &out) != nil {
		return nil
	}
	img, ok := out.Images[taskID]
	if !ok {
		return nil
	}
	return &img
}

// BuildState reads a deployment's state from its build run: none (READY),
// the run's status, output and error message (from a LEFT JOIN: empty when
// the run is missing).
func BuildState(buildRunID, runStatus, output, runError string) (Status, map[string]ImageBuild, string) {
	switch {
	case buildRunID == "":
		return StatusReady, nil, ""
	case runStatus == "COMPLETED":
		var out BuildOutput
		if err := json.Unmarshal([]byte(output), &out); err != nil {
			return StatusFailed, nil, "the build's output is unreadable: " + err.Error()
		}
		return StatusReady, out.Images, ""
	case runStatus == "QUEUED" || runStatus == "STARTING" || runStatus == "RUNNING":
		return StatusBuilding, nil, ""
	case runStatus == "":
		return StatusFailed, nil, "the build run " + buildRunID + " is missing"
	}
	var e struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal([]byte(runError), &e)
	if e.Message == "" {
		e.Message = "the build ended " + runStatus
	}
	return StatusFailed, nil, e.Message
}

// Store persists deployments. CreateDeployment is atomic: either the
// deployment, its files and its tasks are all stored, or nothing is.
type Store interface {
	// CreateDeployment assigns the next version for (project, env), stores d
	// with its files and build run ID, and returns it with ID, Version,
	// CreatedAt and Status (READY without a build run, else BUILDING) set.
	CreateDeployment(ctx context.Context, d Deployment) (Deployment, error)
	// GetDeployment returns errdefs.ErrNotFound for an unknown id. Files are not loaded.
	GetDeployment(ctx context.Context, id string) (Deployment, error)
	// GetDeploymentFiles returns the deployment's files by path.
	GetDeploymentFiles(ctx context.Context, id string) (map[string][]byte, error)
	// ListDeployments returns the deployments of project/env, newest first.
	ListDeployments(ctx context.Context, project, env string, limit int) ([]Deployment, error)
	// CurrentTasks returns the tasks of the latest READY deployment of project/env,
	// ordered by task ID; an empty list (no error) when nothing is deployed.
	CurrentTasks(ctx context.Context, project, env string) ([]Task, error)
	// GetTask returns the task as the latest READY deployment of
	// project/env defines it (with its image build, if any); errdefs.ErrNotFound when that deployment does not define it, even
	// if an older one did (a task dropped by a deploy can no longer run).
	GetTask(ctx context.Context, project, env, taskID string) (Task, error)
	// ListEnvironments returns every project environment with a
	// deployment, ordered by project then env.
	ListEnvironments(ctx context.Context) ([]Environment, error)
}

// Environment is a project environment: where deployments and runs live.
type Environment struct {
	Project string `json:"project"`
	Env     string `json:"env"`
}
