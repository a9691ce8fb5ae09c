package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/sandbox/gvisor"
	"github.com/helmr/helmr/internal/testenv"
)

// measureGvisor measures Helmr's exec on the gvisor tier against `runsc
// exec` of `true` into the container of the workspace's operations
// sandbox, with the flags the gvisor tier gives every runsc command on
// its containers (Runtime.globalArgs, default config).
func measureGvisor(bin string, n, warmup int) (result, error) {
	runsc := os.Getenv("HELMR_RUNSC") // helmr dev's runsc, as it finds it
	if runsc == "" {
		runsc = filepath.Join(testenv.CacheDir(), "bin", "runsc")
	}
	if _, err := os.Stat(runsc); err != nil {
		return result{}, fmt.Errorf("runsc missing (scripts/install-runsc.sh): %w", err)
	}
	d, err := startWorkspace(bin, "gvisor")
	if err != nil {
		return result{}, err
	}
	defer d.close()
	root := filepath.Join(gvisor.DefaultStateDir, instance(d.dataDir), "runsc")
	global := []string{"--root", root, "--platform", gvisor.DefaultPlatform, "--overlay2", "none"}
	id, err := onlyContainer(runsc, global)
	if err != nil {
		return result{}, err
	}
	fmt.Printf("gvisor tier: the workspace's operations sandbox is container %s (runsc --root %s)\n", id, root)
	bare := func() (time.Duration, error) {
		return timed(runsc, append(global, "exec", id, "true")...)
	}
	h, b, err := interleave(n, warmup, func() (time.Duration, error) { return d.exec(context.Background()) }, bare)
	if err != nil {
		return result{}, err
	}
	return result{tier: "gvisor", helmr: h, bare: b, bareDesc: "runsc exec CONTAINER true (same sandbox)"}, nil
}

// onlyContainer is the one running container under the runsc root: with
// HELMR_WARM=0 and no run, the workspace's operations sandbox.
func onlyContainer(runsc string, global []string) (string, error) {
	out, err := exec.Command(runsc, append(global, "list", "--format", "json")...).Output()
	if err != nil {
		return "", fmt.Errorf("runsc list: %w", err)
	}
	var list []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return "", fmt.Errorf("runsc list: %w: %s", err, out)
	}
	var ids []string
	for _, c := range list {
		if c.Status == "running" {
			ids = append(ids, c.ID)
		}
	}
	if len(ids) != 1 {
		return "", fmt.Errorf("runsc list: %d running containers %v, want only the workspace's operations sandbox", len(ids), ids)
	}
	return ids[0], nil
}

// measureProcess measures Helmr's exec on the process tier against
// nsenter into every namespace, the root and the working directory of the
// agent of the workspace's operations sandbox, running `true` there.
func measureProcess(bin string, n, warmup int) (result, error) {
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return result{}, fmt.Errorf("nsenter (util-linux) missing: %w", err)
	}
	d, err := startWorkspace(bin, "process")
	if err != nil {
		return result{}, err
	}
	defer d.close()
	pid, err := opsAgent(d.dev.Cmd.Process.Pid)
	if err != nil {
		return result{}, err
	}
	fmt.Printf("process tier: the workspace's operations sandbox has its agent at host pid %d\n", pid)
	bare := func() (time.Duration, error) {
		return timed(nsenter, "-t", strconv.Itoa(pid), "-a", "-r", "-w", "true")
	}
	h, b, err := interleave(n, warmup, func() (time.Duration, error) { return d.exec(context.Background()) }, bare)
	if err != nil {
		return result{}, err
	}
	return result{tier: "process", helmr: h, bare: b, bareDesc: "nsenter -t AGENT -a -r -w true (same sandbox)"}, nil
}

// opsAgent is the host pid of the agent of the workspace's operations
// sandbox: a `helmr-agent init` child of helmr dev (devPid) whose mount
// namespace has the workspace mounted at /workspace. The tier's warm
// agent, not yet given a sandbox, has none.
func opsAgent(devPid int) (int, error) {
	matches, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var found []int
	for _, m := range matches {
		dir := filepath.Dir(m)
		cmdline, err := os.ReadFile(m)
		if err != nil || !bytes.Equal(cmdline, []byte("helmr-agent\x00init\x00")) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(dir))
		if ppid(pid) != devPid {
			continue
		}
		mounts, err := os.ReadFile(filepath.Join(dir, "mountinfo"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 4 && f[4] == "/workspace" {
				found = append(found, pid)
				break
			}
		}
	}
	if len(found) != 1 {
		return 0, fmt.Errorf("agents of helmr dev (pid %d) with /workspace mounted: %v, want one", devPid, found)
	}
	return found[0], nil
}

// ppid is pid's parent, or 0.
func ppid(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: the fields
	// after its closing one are state, ppid, ...
	rest := data[bytes.LastIndexByte(data, ')')+1:]
	f := strings.Fields(string(rest))
	if len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}
