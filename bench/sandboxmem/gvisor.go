package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/sandbox/gvisor"
	"github.com/helmr/helmr/internal/testenv"
)

// holdJS is what both sides run: print a line, then wait.
const holdJS = `console.log("holding"); setTimeout(() => {}, 20000)`

// gvisorShare prints what Helmr adds per gVisor sandbox: helmr dev's growth
// per sandbox plus the difference between a Helmr sandbox's host cgroup
// working set and a bare runsc sandbox's, running the same node program.
func gvisorShare(ctx context.Context, c *client.Client, devPid int, before int64, ids []string) error {
	during, err := rss(devPid)
	if err != nil {
		return err
	}
	var helmr []int64
	for _, id := range ids {
		sbx, err := sandboxOf(ctx, c, id)
		if err != nil {
			return err
		}
		ws, err := workingSet(filepath.Join("/sys/fs/cgroup/memory", gvisor.DefaultCgroupParent, sbx))
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", sbx, err)
		}
		helmr = append(helmr, ws)
	}
	bare, err := bareRunscSandboxes(len(ids))
	if err != nil {
		return err
	}
	n := float64(len(ids))
	workerPer := float64(during-before) / n
	inSandbox := avg(helmr) - avg(bare)
	total := workerPer + inSandbox
	fmt.Printf("host memory per running sandbox, gvisor tier, %d sandboxes held at once\n", len(ids))
	fmt.Printf("  helmr sandbox cgroup       %6.2f MiB working set (Sentry, gofer, agent, adapter, task)\n", mib(avg(helmr)))
	fmt.Printf("  bare runsc sandbox cgroup  %6.2f MiB working set (same root filesystem, same node program)\n", mib(avg(bare)))
	fmt.Printf("  helmr dev growth / sandbox %6.2f MiB\n", mib(workerPer))
	fmt.Printf("  Helmr's share              %6.2f MiB (target <= 10 MiB); ratio helmr/bare sandbox %.2f\n", mib(total), avg(helmr)/avg(bare))
	return nil
}

// sandboxOf reads which sandbox runs a run from its "sandbox started" event.
func sandboxOf(ctx context.Context, c *client.Client, runID string) (string, error) {
	p, err := c.Events(ctx, runID, 0)
	if err != nil {
		return "", err
	}
	for _, ev := range p.Events {
		var s runs.SystemData
		if ev.Type == runs.EventSystem && json.Unmarshal(ev.Data, &s) == nil && s.Attrs["sandbox"] != "" {
			return s.Attrs["sandbox"], nil
		}
	}
	return "", fmt.Errorf("run %s names no sandbox", runID)
}

// workingSet is a v1 memory cgroup's usage minus its inactive file pages.
func workingSet(dir string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, "memory.usage_in_bytes"))
	if err != nil {
		return 0, err
	}
	usage, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, err
	}
	st, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "total_inactive_file "); ok {
			inactive, _ := strconv.ParseInt(v, 10, 64)
			return usage - inactive, nil
		}
	}
	return usage, nil
}

// bareRunscSandboxes starts n plain `runsc run` sandboxes of the base root
// filesystem running holdJS, each in its own memory cgroup, measures their
// working sets once all print, and removes them.
func bareRunscSandboxes(n int) ([]int64, error) {
	runsc := filepath.Join(testenv.CacheDir(), "bin", "runsc")
	rootfs := filepath.Join(testenv.CacheDir(), "bases", "bookworm-node22", "rootfs")
	dir, err := os.MkdirTemp("", "helmr-mem-runsc-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	state := filepath.Join(dir, "state")
	// runsc mounts a "null" network namespace in its state dir.
	defer unix.Unmount(filepath.Join(state, "null-netns"), unix.MNT_DETACH)
	var cmds []*exec.Cmd
	var names []string
	defer func() {
		for i, cmd := range cmds {
			_ = exec.Command(runsc, "--root", state, "delete", "--force", names[i]).Run()
			_ = cmd.Wait()
		}
		parents, _ := filepath.Glob("/sys/fs/cgroup/*/helmr-bench-bare")
		for _, p := range parents {
			_ = os.Remove(p)
		}
	}()
	for i := 0; i < n; i++ {
		id := make([]byte, 6)
		_, _ = rand.Read(id)
		name := "bare-" + hex.EncodeToString(id)
		bundle := filepath.Join(dir, name)
		if err := os.Mkdir(bundle, 0o700); err != nil {
			return nil, err
		}
		spec := map[string]any{
			"ociVersion": "1.0.2",
			"process": map[string]any{"args": []string{"/usr/local/bin/node", "-e", holdJS},
				"env": []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, "cwd": "/", "user": map[string]int{"uid": 0, "gid": 0}},
			"root": map[string]any{"path": rootfs, "readonly": true},
			"linux": map[string]any{
				"cgroupsPath": "/helmr-bench-bare/" + name,
				"namespaces":  []map[string]string{{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}},
			},
		}
		data, _ := json.Marshal(spec)
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
			return nil, err
		}
		cmd := exec.Command(runsc, "--root", state, "--platform", "systrap", "--network", "none", "--overlay2", "none",
			"run", "--bundle", bundle, name)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		cmds, names = append(cmds, cmd), append(names, name)
		line, err := bufio.NewReader(out).ReadString('\n')
		if err != nil || line != "holding\n" {
			return nil, fmt.Errorf("bare runsc printed %q: %v", line, err)
		}
	}
	time.Sleep(500 * time.Millisecond) // as long as the Helmr side had to settle, at least
	var ws []int64
	for _, name := range names {
		w, err := workingSet(filepath.Join("/sys/fs/cgroup/memory/helmr-bench-bare", name))
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}
