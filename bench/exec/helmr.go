package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/testenv"
	"github.com/helmr/helmr/internal/workspaces"
)

// devEnv is a helmr dev of one tier with a deployed bench/exec/project
// and a workspace of its task whose operations sandbox is up.
type devEnv struct {
	dev     *testenv.Dev
	c       *client.Client
	ws      string
	dataDir string
	tmp     string
}

// startWorkspace starts helmr dev on tier with a fresh data dir, deploys
// bench/exec/project, creates a workspace of its task and runs one exec
// in it, which starts the workspace's sandbox for operations.
func startWorkspace(bin, tier string) (*devEnv, error) {
	tmp, err := os.MkdirTemp("", "helmr-bench-exec-")
	if err != nil {
		return nil, err
	}
	d := &devEnv{tmp: tmp, dataDir: filepath.Join(tmp, "data")}
	env := append(os.Environ(), "HELMR_DATA_DIR="+d.dataDir, "HELMR_PROFILE="+filepath.Join(tmp, "profile.json"),
		"HELMR_ADDR=127.0.0.1:0", "HELMR_CACHE_DIR="+testenv.CacheDir(), "HELMR_PROJECT=", "HELMR_URL=",
		"HELMR_RUNTIME="+tier, "HELMR_WARM=0", "HELMR_API_KEY=", "HELMR_OWNER_TOKEN=", "HELMR_OWNER_TOKEN_FILE=")
	if d.dev, err = testenv.StartDev(bin, env); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	env = append(env, "HELMR_URL="+d.dev.URL)
	cmd := exec.Command(filepath.Join(bin, "helmr"), "deploy", "bench/exec/project")
	cmd.Env, cmd.Dir = env, testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		d.close()
		return nil, fmt.Errorf("helmr deploy bench/exec/project: %v\n%s", err, out)
	}
	d.c = client.New(d.dev.URL, d.dev.Token)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ws, err := d.c.CreateWorkspace(ctx, "execbench", "dev", workspaces.CreateRequest{Task: "shell"})
	if err != nil {
		d.close()
		return nil, fmt.Errorf("create a workspace: %w", err)
	}
	d.ws = ws.ID
	began := time.Now()
	if _, err := d.exec(ctx); err != nil {
		d.close()
		return nil, fmt.Errorf("first exec (starts the workspace's sandbox): %w", err)
	}
	fmt.Printf("%s tier: workspace %s, first exec (starts its sandbox) %.0f ms\n", tier, d.ws, float64(time.Since(began))/float64(time.Millisecond))
	return d, nil
}

// exec runs `true` in the workspace through the API and returns the
// round trip.
func (d *devEnv) exec(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	res, err := d.c.Exec(ctx, d.ws, workspaces.ExecRequest{Argv: []string{"true"}})
	dt := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if res.ExitCode != 0 || res.Signal != "" {
		return 0, fmt.Errorf("exec true = exit %d %s: %s", res.ExitCode, res.Signal, res.Stderr)
	}
	return dt, nil
}

func (d *devEnv) close() {
	d.dev.Stop()
	os.RemoveAll(d.tmp)
}

// instance is the name under which the worker of dataDir keeps its
// sandboxes' state (cli.workerInstance): "w-" and the first 6 bytes of
// the SHA-256 of the data dir's absolute path, in hex.
func instance(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return "w-" + hex.EncodeToString(sum[:6])
}

// interleave runs warmup rounds and then n measured rounds of helmr and
// bare, alternating which goes first, so that drift on the host weighs on
// both alike.
func interleave(n, warmup int, helmr, bare func() (time.Duration, error)) (h, b []time.Duration, err error) {
	for i := 0; i < warmup+n; i++ {
		first, second := helmr, bare
		if i%2 == 1 {
			first, second = bare, helmr
		}
		d1, err := first()
		if err != nil {
			return nil, nil, err
		}
		d2, err := second()
		if err != nil {
			return nil, nil, err
		}
		if i < warmup {
			continue
		}
		if i%2 == 1 {
			d1, d2 = d2, d1
		}
		h, b = append(h, d1), append(b, d2)
	}
	return h, b, nil
}

// timed runs cmd and returns how long it took from start to exit.
func timed(name string, args ...string) (time.Duration, error) {
	cmd := exec.Command(name, args...)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	dt := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return dt, nil
}
