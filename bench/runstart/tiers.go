package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/helmr/helmr/internal/testenv"
)

// tierBench is one isolation tier's measurement: Helmr on that tier against
// starting the same node one-liner on the same root filesystem with the
// tier's own tool and nothing of Helmr.
type tierBench struct {
	name     string
	bare     func() (time.Duration, error)
	bareDesc string
	target   float64
	skip     string
}

func tierBenches(rootfs string) []tierBench {
	out := []tierBench{{
		name: "process", target: 1.5,
		bareDesc: "chroot ROOTFS node -e 'console.log(...)'",
		bare:     func() (time.Duration, error) { return bareStart(rootfs) },
	}}
	runsc := filepath.Join(testenv.CacheDir(), "bin", "runsc")
	gv := tierBench{name: "gvisor", target: 1.3, bareDesc: "runsc run (systrap, no network) of ROOTFS, node -e 'console.log(...)'"}
	if _, err := os.Stat(runsc); err != nil {
		gv.skip = "runsc not installed (scripts/install-runsc.sh)"
	} else {
		gv.bare = func() (time.Duration, error) { return bareRunsc(runsc, rootfs) }
	}
	return append(out, gv)
}

// bareRunsc runs node in rootfs under a plain `runsc run` with a minimal
// OCI bundle and times the first line of output.
func bareRunsc(runsc, rootfs string) (time.Duration, error) {
	dir, err := os.MkdirTemp("", "helmr-bench-runsc-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{"args": []string{"/usr/local/bin/node", "-e", `console.log("first line")`},
			"env": []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, "cwd": "/", "user": map[string]int{"uid": 0, "gid": 0}},
		"root":  map[string]any{"path": rootfs, "readonly": true},
		"linux": map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}}},
	}
	data, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		return 0, err
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	root := filepath.Join(dir, "state")
	// runsc mounts a "null" network namespace in its state dir.
	defer unix.Unmount(filepath.Join(root, "null-netns"), unix.MNT_DETACH)
	cmd := exec.Command(runsc, "--root", root, "--platform", "systrap", "--network", "none", "--overlay2", "none",
		"run", "--bundle", dir, "bare-"+hex.EncodeToString(id))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	d := time.Since(start)
	_ = cmd.Wait()
	if err != nil || line != "first line\n" {
		return 0, fmt.Errorf("bare runsc printed %q: %v", line, err)
	}
	return d, nil
}
