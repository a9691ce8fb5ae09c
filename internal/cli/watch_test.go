package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func writeProjectFile(t *testing.T, root, name, data string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWatcherScan: a look records the project's files, not those of
// dot-directories, node_modules or the skipped data dir.
func TestWatcherScan(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"helmr.config.ts", "tasks/a.ts", "lib/x/y.ts", ".helmrignore",
		"node_modules/@helmr/sdk/index.js", ".git/HEAD", ".helmr/helmr.db", "data/store.db"} {
		writeProjectFile(t, root, name, "x")
	}
	w := &watcher{root: root, skip: []string{filepath.Join(root, "data")}}
	var got []string
	for p := range w.scan() {
		got = append(got, p)
	}
	slices.Sort(got)
	want := []string{".helmrignore", "helmr.config.ts", "lib/x/y.ts", "tasks/a.ts"}
	if !slices.Equal(got, want) {
		t.Errorf("scan = %q, want %q", got, want)
	}
}

func TestDescribeChanges(t *testing.T) {
	t0 := time.Unix(1000, 0)
	f := func(size int64, mod time.Time) fileState { return fileState{size: size, mod: mod, mode: 0o644} }
	old := map[string]fileState{"a.ts": f(1, t0), "b.ts": f(1, t0), "c.ts": f(1, t0), "d.ts": f(1, t0)}
	cur := map[string]fileState{"a.ts": f(2, t0), "b.ts": f(1, t0.Add(time.Second)), "c.ts": f(1, t0), "e.ts": f(1, t0)}
	if got, want := describeChanges(old, cur), "changed a.ts, b.ts; added e.ts; removed d.ts"; got != want {
		t.Errorf("describeChanges = %q, want %q", got, want)
	}
	many := map[string]fileState{}
	for _, p := range []string{"1", "2", "3", "4", "5", "6", "7"} {
		many[p+".ts"] = f(1, t0)
	}
	if got, want := describeChanges(map[string]fileState{}, many), "added 1.ts, 2.ts, 3.ts, 4.ts, 5.ts, and 2 more"; got != want {
		t.Errorf("describeChanges(7 new) = %q, want %q", got, want)
	}
}

// TestWatcherRedeploys: the watcher deploys at start, again after each
// change with the files named, and goes on after a failed deploy.
func TestWatcherRedeploys(t *testing.T) {
	root := t.TempDir()
	writeProjectFile(t, root, "helmr.config.ts", "export default {}")
	writeProjectFile(t, root, "tasks/a.ts", "one")
	calls := make(chan int, 10)
	n := 0
	out := &lockedBuffer{}
	w := &watcher{root: root, interval: 10 * time.Millisecond, out: out, deploy: func(context.Context) error {
		n++
		calls <- n
		if n == 2 {
			return errors.New("bundle failed: tasks/a.ts:1:1: syntax error")
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	next := func(want int) {
		t.Helper()
		select {
		case got := <-calls:
			if got != want {
				t.Fatalf("deploy #%d, want #%d", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no deploy #%d; output:\n%s", want, out.String())
		}
	}
	next(1)
	writeProjectFile(t, root, "tasks/a.ts", "one, edited")
	next(2)
	if !strings.Contains(out.String(), "watch: changed tasks/a.ts; deploying\n") {
		t.Errorf("output does not name the changed file:\n%s", out)
	}
	writeProjectFile(t, root, "tasks/b.ts", "two")
	next(3)
	got := out.String()
	if !strings.Contains(got, "watch: the deploy failed: bundle failed: tasks/a.ts:1:1: syntax error\n") ||
		!strings.Contains(got, "watch: added tasks/b.ts; deploying\n") {
		t.Errorf("output does not show the failed deploy and then the added file:\n%s", got)
	}
	// Nothing changed since: no further deploy while the watch goes on.
	writeProjectFile(t, root, "node_modules/x/index.js", "ignored")
	select {
	case c := <-calls:
		t.Errorf("deploy #%d without a change to the project's files", c)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestCheckWatchPath(t *testing.T) {
	project := t.TempDir()
	writeProjectFile(t, project, "helmr.config.ts", "")
	if got, err := checkWatchPath(project); err != nil || got != project {
		t.Errorf("checkWatchPath(project) = %q, %v; want it", got, err)
	}
	empty := t.TempDir()
	file := filepath.Join(project, "helmr.config.ts")
	for _, tc := range []struct{ path, want string }{
		{empty, "no helmr.config.ts there"},
		{file, "not a directory"},
		{filepath.Join(empty, "nope"), "--watch: stat"},
	} {
		if _, err := checkWatchPath(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("checkWatchPath(%q) = %v, want an error with %q", tc.path, err, tc.want)
		}
	}
}
