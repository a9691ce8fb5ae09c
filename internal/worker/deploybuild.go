package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/images"
	"github.com/helmr/helmr/internal/runs"
)

// executeBuild runs a build run: it prepares every task's image of the
// deployment (each distinct image once) as a run would, streaming each
// step's output as the run's build log, and completes with the images'
// digests. A failure is deployment_build, naming the image and the step.
func (w *Worker) executeBuild(ctx context.Context, l Lease) *runs.Outcome {
	if l.Build == nil {
		return failed(runs.ClassDeploymentBuild, "the lease of build run %s carries no deployment manifest", l.Run.ID)
	}
	var opts runs.BuildPayload
	if len(l.Run.Payload) > 0 {
		if err := json.Unmarshal(l.Run.Payload, &opts); err != nil {
			return failed(runs.ClassDeploymentBuild, "the build run's payload is not a build request: %v", err)
		}
	}
	maxDur := time.Duration(l.Run.MaxDurationSec) * time.Second
	if maxDur <= 0 {
		maxDur = runs.BuildMaxDuration * time.Second
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, stop := context.WithTimeoutCause(ctx, maxDur, errTimedOut)
	defer stop()
	defer w.watchCancel(ctx, l.Run.ID, cancel)()

	note := runs.SystemData{Message: fmt.Sprintf("building the images of deployment version %d on the %s tier", l.Run.DeploymentVersion, w.cfg.Runtime.Name()),
		Attrs: map[string]string{"tier": w.cfg.Runtime.Name(), "worker": w.cfg.ID, "noCache": fmt.Sprint(opts.NoCache)}}
	if b := w.cfg.BuildRuntime; b != nil && b.Name() != w.cfg.Runtime.Name() {
		note.Message = fmt.Sprintf("building the images of deployment version %d on a %s worker; %s", l.Run.DeploymentVersion, w.cfg.Runtime.Name(),
			strings.TrimPrefix(buildTierNote(w.cfg.Runtime.Name(), b.Name()), "[helmr] "))
		note.Attrs["buildTier"] = b.Name()
	}
	if err := w.cfg.Control.Started(ctx, l.Run.ID, w.cfg.ID, w.cfg.Runtime.Name(), note); err != nil {
		if errors.Is(err, errdefs.ErrConflict) {
			return nil // canceled before it started
		}
		return failed(runs.ClassDeploymentBuild, "report start: %v", err)
	}
	files, err := w.cfg.Control.Files(ctx, l.Run.DeploymentID)
	if err != nil {
		return failed(runs.ClassDeploymentBuild, "fetch deployment %s: %v", l.Run.DeploymentID, err)
	}
	logs := newLogSink(w.cfg.Control, l.Run.ID, w.log)
	defer logs.Close()
	say := func(format string, args ...any) { logs.Write("build", []byte(fmt.Sprintf(format, args...)+"\n")) }

	// Tasks that declare the same image share one build.
	type group struct {
		img   *deployments.ImageManifest
		tasks []deployments.TaskManifest
	}
	var groups []*group
	byImage := map[string]*group{}
	for _, t := range l.Build.Tasks {
		if t.Sandbox == nil {
			continue
		}
		key, _ := json.Marshal(t.Sandbox.Image)
		g := byImage[string(key)]
		if g == nil {
			g = &group{img: t.Sandbox.Image}
			byImage[string(key)] = g
			groups = append(groups, g)
		}
		g.tasks = append(g.tasks, t)
	}
	out := deployments.BuildOutput{Images: map[string]deployments.ImageBuild{}}
	for i, g := range groups {
		var ids []string
		for _, t := range g.tasks {
			ids = append(ids, t.ID)
		}
		name := "(unnamed)"
		if g.img != nil {
			name = g.img.Name
		}
		say("==> image %d/%d: %s (task %s)", i+1, len(groups), name, strings.Join(ids, ", "))
		began := time.Now()
		img, err := w.cfg.Images.Prepare(ctx, g.img, files, images.PrepareOptions{
			Scope: l.Run.Project, NoCache: opts.NoCache,
			Output: func(_ int, _ string, data []byte) { logs.Write("build", data) },
			Secret: func(ctx context.Context, name string) (images.SecretValue, error) {
				v, err := w.cfg.Control.BuildSecret(ctx, l.Run.ID, name)
				return images.SecretValue{Value: v.Value, Egress: v.Egress}, err
			},
		})
		if err == nil {
			// The checks a run makes before it boots, made now, so a deploy
			// of an image that cannot run a task fails here.
			for _, t := range g.tasks {
				if _, err = w.prepare(Lease{Run: l.Run, Task: t}, img, files); err != nil {
					err = fmt.Errorf("task %s: %s", t.ID, strings.TrimPrefix(err.Error(), images.ErrPreparation.Error()+": "))
					break
				}
			}
		}
		if err != nil {
			logs.Close()
			switch cause := context.Cause(ctx); {
			case errors.Is(cause, errCanceled):
				return nil
			case errors.Is(cause, errTimedOut):
				return &runs.Outcome{Status: runs.StatusTimedOut, Error: &runs.Error{Class: runs.ClassTimeout,
					Message: fmt.Sprintf("the build of image %s did not finish within %s", name, maxDur)}}
			}
			msg := strings.TrimPrefix(err.Error(), images.ErrPreparation.Error()+": ")
			return failed(runs.ClassDeploymentBuild, "image %s: %s", name, msg)
		}
		say("image %s: %s (base %s@%s) in %s", name, img.Digest, img.Base, img.BaseDigest, time.Since(began).Round(time.Millisecond))
		for _, t := range g.tasks {
			out.Images[t.ID] = deployments.ImageBuild{Name: name, Digest: img.Digest, Base: img.Base, BaseDigest: img.BaseDigest}
		}
	}
	logs.Close()
	data, err := json.Marshal(out)
	if err != nil {
		return failed(runs.ClassDeploymentBuild, "encode the build's output: %v", err)
	}
	return &runs.Outcome{Status: runs.StatusCompleted, Output: data}
}
