package store

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
)

// CreateDeployment stores d as the next version of its project/env, with its
// files and tasks, in one transaction. The lock on project/env serializes
// deploys to it, so versions never race.
func (db *DB) CreateDeployment(ctx context.Context, d deployments.Deployment) (deployments.Deployment, error) {
	if d.Project == "" || d.Env == "" {
		return deployments.Deployment{}, fmt.Errorf("create deployment: project and env are required: %w", errdefs.ErrInvalid)
	}
	if d.ID == "" {
		d.ID = NewID(DeploymentPrefix)
	}
	d.CreatedAt = Time(d.CreatedAt)
	manifest, err := json.Marshal(d.Manifest)
	if err != nil {
		return deployments.Deployment{}, fmt.Errorf("create deployment: encode manifest: %w", err)
	}
	err = db.write(ctx, func(tx txConn) error {
		if err := tx.lock(ctx, "deployments", d.Project+"/"+d.Env); err != nil {
			return err
		}
		if err := tx.queryRow(ctx, `SELECT COALESCE(MAX(version), 0) + 1 FROM deployments
			WHERE project = ? AND env = ?`, d.Project, d.Env).Scan(&d.Version); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, `INSERT INTO deployments (id, project, env, version, manifest, created_at, build_run_id)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, d.ID, d.Project, d.Env, d.Version, string(manifest), d.CreatedAt, d.BuildRunID); err != nil {
			return err
		}
		for path, content := range d.Files {
			if _, err := tx.exec(ctx, `INSERT INTO deployment_files (deployment_id, path, content)
				VALUES (?, ?, ?)`, d.ID, path, nonNil(content)); err != nil {
				return fmt.Errorf("file %s: %w", path, err)
			}
		}
		for _, t := range d.Manifest.Tasks {
			spec, err := json.Marshal(t)
			if err != nil {
				return fmt.Errorf("task %s: encode: %w", t.ID, err)
			}
			if _, err := tx.exec(ctx, `INSERT INTO tasks (deployment_id, task_id, project, env, spec)
				VALUES (?, ?, ?, ?, ?)`, d.ID, t.ID, d.Project, d.Env, string(spec)); err != nil {
				return fmt.Errorf("task %s: %w", t.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return deployments.Deployment{}, fmt.Errorf("create deployment of %s/%s: %w", d.Project, d.Env, err)
	}
	d.Status = deployments.StatusReady
	if d.BuildRunID != "" {
		d.Status = deployments.StatusBuilding
	}
	return d, nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// deploymentColumns and deploymentFrom read a deployment with the state
// of its build run.
const (
	deploymentColumns = `d.id, d.project, d.env, d.version, d.manifest, d.created_at, d.build_run_id,
	COALESCE(r.status, ''), COALESCE(r.output, ''), COALESCE(r.error, '')`
	deploymentFrom = ` FROM deployments d LEFT JOIN runs r ON r.id = d.build_run_id`
)

func scanDeployment(row scanner) (deployments.Deployment, error) {
	var d deployments.Deployment
	var manifest, status, output, runErr string
	if err := row.Scan(&d.ID, &d.Project, &d.Env, &d.Version, &manifest, timeCol{&d.CreatedAt}, &d.BuildRunID,
		&status, &output, &runErr); err != nil {
		return deployments.Deployment{}, err
	}
	d.Status, d.Images, d.BuildError = deployments.BuildState(d.BuildRunID, status, output, runErr)
	if err := json.Unmarshal([]byte(manifest), &d.Manifest); err != nil {
		return deployments.Deployment{}, fmt.Errorf("decode manifest of deployment %s: %w", d.ID, err)
	}
	return d, nil
}

// GetDeployment returns the deployment with id, without its files.
func (db *DB) GetDeployment(ctx context.Context, id string) (deployments.Deployment, error) {
	d, err := scanDeployment(db.read().queryRow(ctx, `SELECT `+deploymentColumns+deploymentFrom+` WHERE d.id = ?`, id))
	if err != nil {
		return deployments.Deployment{}, wrap(err, errdefs.ErrNotFound, "get deployment %s", id)
	}
	return d, nil
}

// GetDeploymentFiles returns the files of the deployment with id by path
// (an empty map when it has none); errdefs.ErrNotFound for an unknown
// id. The deployment row and its files are written together and never
// change, so two statements see a consistent pair.
func (db *DB) GetDeploymentFiles(ctx context.Context, id string) (map[string][]byte, error) {
	var one int
	err := db.read().queryRow(ctx, `SELECT 1 FROM deployments WHERE id = ?`, id).Scan(&one)
	if err != nil {
		return nil, wrap(err, errdefs.ErrNotFound, "get files of deployment %s", id)
	}
	rows, err := db.read().query(ctx, `SELECT path, content FROM deployment_files WHERE deployment_id = ?`, id)
	if err != nil {
		return nil, fmt.Errorf("get files of deployment %s: %w", id, err)
	}
	defer rows.Close()
	files := map[string][]byte{}
	for rows.Next() {
		var path string
		var content []byte
		if err := rows.Scan(&path, &content); err != nil {
			return nil, fmt.Errorf("get files of deployment %s: %w", id, err)
		}
		files[path] = nonNil(content)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get files of deployment %s: %w", id, err)
	}
	return files, nil
}

// ListDeployments returns the deployments of project/env, newest first.
func (db *DB) ListDeployments(ctx context.Context, project, env string, limit int) ([]deployments.Deployment, error) {
	limit = Limit(limit, DefaultDeploymentsLimit, MaxDeploymentsLimit)
	rows, err := db.read().query(ctx, `SELECT `+deploymentColumns+deploymentFrom+`
		WHERE d.project = ? AND d.env = ? ORDER BY d.version DESC LIMIT ?`, project, env, limit)
	out, err := scanAll(rows, err, scanDeployment)
	if err != nil {
		return nil, fmt.Errorf("list deployments of %s/%s: %w", project, env, err)
	}
	return out, nil
}

// ListEnvironments returns the project environments with a deployment.
func (db *DB) ListEnvironments(ctx context.Context) ([]deployments.Environment, error) {
	rows, err := db.read().query(ctx, `SELECT DISTINCT project, env FROM deployments ORDER BY project, env`)
	out, err := scanAll(rows, err, func(row scanner) (deployments.Environment, error) {
		var e deployments.Environment
		return e, row.Scan(&e.Project, &e.Env)
	})
	if err != nil {
		return nil, fmt.Errorf("list project environments: %w", err)
	}
	return out, nil
}

// latestTaskQuery selects tasks of the latest READY deployment of a
// project/env (no build run, or a completed one) with the build's output.
const latestTaskQuery = `SELECT d.id, d.version, t.spec, COALESCE(r.output, '') FROM deployments d
	JOIN tasks t ON t.deployment_id = d.id
	LEFT JOIN runs r ON r.id = d.build_run_id
	WHERE d.id = (SELECT d2.id FROM deployments d2 LEFT JOIN runs r2 ON r2.id = d2.build_run_id
		WHERE d2.project = ? AND d2.env = ? AND (d2.build_run_id = '' OR r2.status = 'COMPLETED')
		ORDER BY d2.version DESC LIMIT 1)`

// CurrentTasks returns the tasks of the latest READY deployment of project/env,
// by task id; none (and no error) when nothing is deployed.
func (db *DB) CurrentTasks(ctx context.Context, project, env string) ([]deployments.Task, error) {
	rows, err := db.read().query(ctx, latestTaskQuery+` ORDER BY t.task_id`, project, env)
	out, err := scanAll(rows, err, func(row scanner) (deployments.Task, error) { return scanTask(row, project, env) })
	if err != nil {
		return nil, fmt.Errorf("current tasks of %s/%s: %w", project, env, err)
	}
	return out, nil
}

// GetTask returns taskID as defined by the latest READY deployment of project/env.
// A task the latest deployment dropped is errdefs.ErrNotFound, even if
// an older version defined it: only current code can be triggered.
func (db *DB) GetTask(ctx context.Context, project, env, taskID string) (deployments.Task, error) {
	t, err := scanTask(db.read().queryRow(ctx, latestTaskQuery+` AND t.task_id = ?`, project, env, taskID), project, env)
	if err != nil {
		return deployments.Task{}, wrap(err, errdefs.ErrNotFound, "get task %s of %s/%s", taskID, project, env)
	}
	return t, nil
}

func scanTask(row scanner, project, env string) (deployments.Task, error) {
	t := deployments.Task{Project: project, Env: env}
	var spec, output string
	if err := row.Scan(&t.DeploymentID, &t.DeploymentVersion, &spec, &output); err != nil {
		return deployments.Task{}, err
	}
	if err := json.Unmarshal([]byte(spec), &t.Spec); err != nil {
		return deployments.Task{}, fmt.Errorf("decode task spec: %w", err)
	}
	t.ID = t.Spec.ID
	t.Image = deployments.TaskImage(output, t.ID)
	return t, nil
}
