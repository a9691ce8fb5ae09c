package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/deployments/build"
)

// watchInterval is how often helmr dev --watch looks at the project's
// files, and how long they must stay unchanged before it deploys.
const watchInterval = 300 * time.Millisecond

// watchMaxFiles bounds the files one look stats: past it, the watcher
// says so once and watches only the first ones it walks.
const watchMaxFiles = 20000

// watcher deploys a task project, then polls its files and deploys again
// once a change has settled (no further change for one interval).
// Polling needs nothing from the platform and sees every editor's way of
// saving (in place, or a new file renamed over the old one).
type watcher struct {
	root     string                      // the project, absolute
	skip     []string                    // absolute directories never looked at (helmr dev's data dir)
	interval time.Duration               // between looks; the quiet time before a deploy
	deploy   func(context.Context) error // prints what it deployed
	out      io.Writer
	warned   bool // watchMaxFiles was reached
}

// checkWatchPath refuses a PATH that is no task project before helmr dev
// starts anything.
func checkWatchPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("--watch: %w", err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("--watch %s: not a directory (want a task project's, holding helmr.config.ts)", path)
	}
	for _, name := range build.ConfigFiles {
		if _, err := os.Stat(filepath.Join(abs, name)); err == nil {
			return abs, nil
		}
	}
	return "", fmt.Errorf("--watch %s: no helmr.config.ts there (helmr init scaffolds a task project)", path)
}

// run deploys once, then on every settled change, until ctx ends. A
// failed deploy is printed, and the watch goes on.
func (w *watcher) run(ctx context.Context) {
	base := w.scan()
	fmt.Fprintf(w.out, "watch: deploying %s (%d files), then again on every change\n", w.root, len(base))
	w.deployOnce(ctx)
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := w.scan()
		if snapshotsEqual(base, now) {
			continue
		}
		// Wait for the change to settle: an editor (or git checkout)
		// writes several files, some in several steps.
		for settled := false; !settled; {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			next := w.scan()
			settled = snapshotsEqual(now, next)
			now = next
		}
		fmt.Fprintf(w.out, "watch: %s; deploying\n", describeChanges(base, now))
		base = now
		w.deployOnce(ctx)
	}
}

func (w *watcher) deployOnce(ctx context.Context) {
	err := w.deploy(ctx)
	if err == nil || ctx.Err() != nil {
		return
	}
	var ee exitError
	if errors.As(err, &ee) && ee.err == nil {
		// The deploy printed why (a failed image build).
		fmt.Fprintln(w.out, "watch: the deploy failed; the previous version stays current; watching for the next change")
		return
	}
	fmt.Fprintf(w.out, "watch: the deploy failed: %s\nwatch: the previous version stays current; watching for the next change\n", oneLine(err.Error()))
}

// fileState is what a look records of one file.
type fileState struct {
	size int64
	mod  time.Time
	mode fs.FileMode
}

// scan stats the project's files (relative slash paths), leaving out
// dot-directories (.git, helmr dev's .helmr), node_modules and w.skip.
// An unreadable entry is left out: the deploy reports what it cannot read.
func (w *watcher) scan() map[string]fileState {
	files := map[string]fileState{}
	_ = filepath.WalkDir(w.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && p != w.root {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if p != w.root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || slices.Contains(w.skip, p)) {
				return fs.SkipDir
			}
			return nil
		}
		if len(files) >= watchMaxFiles {
			if !w.warned {
				w.warned = true
				fmt.Fprintf(w.out, "watch: %s has more than %d files: watching only the first %d (move data out of the project, or into a dot-directory)\n", w.root, watchMaxFiles, watchMaxFiles)
			}
			return fs.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(w.root, p)
		files[filepath.ToSlash(rel)] = fileState{size: info.Size(), mod: info.ModTime(), mode: info.Mode()}
		return nil
	})
	return files
}

func snapshotsEqual(a, b map[string]fileState) bool {
	if len(a) != len(b) {
		return false
	}
	for p, s := range a {
		if t, ok := b[p]; !ok || t.size != s.size || !t.mod.Equal(s.mod) || t.mode != s.mode {
			return false
		}
	}
	return true
}

// describeChanges names the files that changed from old to cur: "changed
// tasks/a.ts; added tasks/b.ts; removed tasks/c.ts" (at most 5 of each).
func describeChanges(old, cur map[string]fileState) string {
	var changed, added, removed []string
	for p, s := range cur {
		o, ok := old[p]
		switch {
		case !ok:
			added = append(added, p)
		case o.size != s.size || !o.mod.Equal(s.mod) || o.mode != s.mode:
			changed = append(changed, p)
		}
	}
	for p := range old {
		if _, ok := cur[p]; !ok {
			removed = append(removed, p)
		}
	}
	var parts []string
	for _, g := range []struct {
		verb  string
		paths []string
	}{{"changed", changed}, {"added", added}, {"removed", removed}} {
		if len(g.paths) == 0 {
			continue
		}
		slices.Sort(g.paths)
		list := g.paths
		if len(list) > 5 {
			list = append(slices.Clip(list[:5]), fmt.Sprintf("and %d more", len(g.paths)-5))
		}
		parts = append(parts, g.verb+" "+strings.Join(list, ", "))
	}
	return strings.Join(parts, "; ")
}

// watchProject is helmr dev --watch: it deploys the project at root (to
// this helmr dev, as the CLI's helmr deploy would) until ctx ends.
func (a *App) watchProject(ctx context.Context, root string) {
	var skip []string
	if d, err := filepath.Abs(a.cfg.DataDir); err == nil {
		skip = append(skip, d)
	}
	w := &watcher{root: root, skip: skip, interval: watchInterval, out: a.Stdout,
		deploy: func(ctx context.Context) error { return a.deploy(ctx, root, false, false, false) }}
	w.run(ctx)
}
