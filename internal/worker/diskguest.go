package worker

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/disk"
)

// A tier whose guest runs a kernel of its own and sees the host's
// directories only as disks made at Start (sandbox.Traits.DiskGuest: the
// microvm tier) is driven differently in three places:
//
//   - the workspace: every workspace is a disk (such a worker needs a
//     workspace quota), handed over unmounted (Spec.WorkspaceImage) for
//     the guest to write in place. The host mounts it only to seed a new
//     one before Start, and to look into it once the sandbox is
//     destroyed. A sandbox's image is never renamed while the sandbox
//     runs (the tier may open it by its path again, to checkpoint it):
//     a sandbox booted ahead gets its run's workspace name as a second
//     link, and the booted name goes with the sandbox's directory;
//   - late files: a run's task bundles reach a sandbox booted ahead
//     through its agent (sandbox.Sandbox.WriteFile under /opt/helmr),
//     not through the host's helmr dir, which the guest saw only at
//     Start. A cold boot writes them there before Start;
//   - what the host cannot learn while the guest runs (whether the
//     workspace reached its quota) it learns after Destroy.

// maxPlacedFile is the largest task file placed through a sandbox's
// agent (one frame, base64 in JSON): a deployment with a larger one boots
// its runs' sandboxes with the files instead of taking one booted ahead.
const maxPlacedFile = 8 << 20

// diskGuest reports whether the worker's tier takes workspaces as disks.
func (w *Worker) diskGuest() bool { return w.traits.DiskGuest }

// attachDisk gives a sandbox about to start the workspace image img:
// mounted at dir for a tier that mounts host directories, else as it is.
func (w *Worker) attachDisk(img, dir string) (*disk.Disk, error) {
	if w.diskGuest() {
		return disk.Unmounted(img)
	}
	return disk.Mount(img, dir, false)
}

// handOver sets spec's workspace: d (nil: the directory dir), unmounted
// and as an image for a disk guest, else mounted at dir.
func (w *Worker) handOver(spec *sandbox.Spec, d *disk.Disk, dir string) error {
	if d == nil || !w.diskGuest() {
		spec.WorkspaceHost = dir
		return nil
	}
	if err := d.Detach(); err != nil {
		return fmt.Errorf("hand the workspace disk to the sandbox: %w", err)
	}
	spec.WorkspaceImage = d.Image
	return nil
}

// assignImage gives the workspace disk d of a running sandbox the name
// target: renamed, or for a disk guest (whose image keeps its name while
// it runs) linked, the old name going with the sandbox's directory.
func (w *Worker) assignImage(d *disk.Disk, target string) error {
	var err error
	if w.diskGuest() {
		err = os.Link(d.Image, target)
	} else {
		err = os.Rename(d.Image, target)
	}
	if err != nil {
		return err
	}
	d.Image = target
	return nil
}

// taskFiles are the deployment's files a run's sandbox has under
// /opt/helmr/task: its bundles, by path.
func taskFiles(files map[string][]byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	for p, data := range files {
		if !strings.HasPrefix(p, "bundles/") {
			continue
		}
		if !deployments.ValidFilePath(p) {
			return nil, fmt.Errorf("deployment file %q has an unsafe path", p)
		}
		out[p] = data
	}
	return out, nil
}

// placeable reports whether files can reach a running sandbox of the
// worker's tier: through its host dir, or one by one through its agent.
func (w *Worker) placeable(files map[string][]byte) bool {
	if !w.diskGuest() {
		return true
	}
	for p, data := range files {
		if strings.HasPrefix(p, "bundles/") && len(data) > maxPlacedFile {
			return false
		}
	}
	return true
}

// placeTask puts the deployment's bundles under /opt/helmr/task: into the
// sandbox's host helmr dir, which it sees (it has not started yet, or its
// tier mounts the dir), else through its agent.
func (w *Worker) placeTask(ctx context.Context, b *booted, files map[string][]byte) error {
	task, err := taskFiles(files)
	if err != nil {
		return err
	}
	for p, data := range task {
		if b.box == nil || !w.diskGuest() {
			err = writeFile(filepath.Join(b.helmrDir, "task", filepath.FromSlash(p)), data)
		} else {
			err = b.box.WriteFile(ctx, sandbox.File{Path: path.Join("/opt/helmr/task", p), Data: data, Mode: 0o644})
		}
		if err != nil {
			return fmt.Errorf("write task files: %w", err)
		}
	}
	b.taskPlaced = true
	return nil
}

// quotaNote is the run's event for a workspace that reached its quota:
// for a disk guest, learnt from the image once the sandbox is gone.
func (w *Worker) quotaNote(d *disk.Disk) []runs.SystemData {
	if d == nil || !w.diskGuest() {
		return nil
	}
	full, err := w.imageFull(d.Image)
	if err != nil {
		w.log.Warn("look into a workspace image", "image", filepath.Base(d.Image), "err", err)
	}
	if !full {
		return nil
	}
	return []runs.SystemData{quotaReached(d.Size)}
}

// imageFull mounts a workspace image read-only for a look (staging/look-*,
// which a restarted worker sweeps) and reports whether it is full.
func (w *Worker) imageFull(img string) (bool, error) {
	dir, err := os.MkdirTemp(filepath.Join(w.cfg.DataDir, "staging"), "look-")
	if err != nil {
		return false, err
	}
	defer os.Remove(dir)
	d, err := disk.Mount(img, dir, true)
	if err != nil {
		return false, err
	}
	full := d.Full()
	return full, d.Close()
}
