// Command files measures file transfer through a workspace's files API
// (issue 15): writing and reading a 64 MiB file with PUT and GET
// /v1/workspaces/{id}/files (helmr dev, gVisor tier, the workspace's
// operations sandbox up), against `cat` of the same file through `runsc
// exec` into that same sandbox, measured in the same run, interleaved
// with Helmr's:
//
//   - write: the file from memory as the request body, against
//     `runsc exec CONTAINER sh -c 'cat > /workspace/bare.bin' < FILE`;
//   - read: the body to nowhere, against
//     `runsc exec CONTAINER cat /workspace/f.bin > /dev/null`.
//
// Both with the runsc flags the gvisor tier gives its containers (--root
// of the worker's instance, --platform systrap, --overlay2 none). Target:
// Helmr's median throughput at least 0.5x the bare one, each way. (Helmr's
// worker moves a workspace file in the workspace's host directory, which
// the sandbox mounts; see internal/worker/hostfiles.go for why the agent
// relay cannot reach the target.) The file is checked by its SHA-256 in
// the sandbox after the writes and read back after the reads. Run as root
// after scripts/setup.sh:
//
//	go run ./bench/files [-n 5] [-mib 64]
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/sandbox/gvisor"
	"github.com/helmr/helmr/internal/testenv"
	"github.com/helmr/helmr/internal/workspaces"
)

// target is issue 15's: at least half the bare throughput.
const target = 0.5

func main() {
	n := flag.Int("n", 5, "measured transfers per side and direction")
	mib := flag.Int("mib", 64, "the file's size in MiB")
	flag.Parse()
	if err := run(*n, *mib); err != nil {
		fmt.Fprintln(os.Stderr, "files:", err)
		os.Exit(1)
	}
}

func run(n, mib int) error {
	if n < 1 || mib < 1 {
		return fmt.Errorf("-n and -mib must be at least 1")
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root: helmr dev's sandboxes need it, and so does runsc exec")
	}
	runsc := os.Getenv("HELMR_RUNSC")
	if runsc == "" {
		runsc = filepath.Join(testenv.CacheDir(), "bin", "runsc")
	}
	if _, err := os.Stat(runsc); err != nil {
		return fmt.Errorf("runsc missing (scripts/install-runsc.sh): %w", err)
	}
	bin, err := testenv.BuildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	d, err := startWorkspace(bin)
	if err != nil {
		return err
	}
	defer d.close()
	root := filepath.Join(gvisor.DefaultStateDir, instance(d.dataDir), "runsc")
	global := []string{"--root", root, "--platform", gvisor.DefaultPlatform, "--overlay2", "none"}
	id, err := onlyContainer(runsc, global)
	if err != nil {
		return err
	}
	fmt.Printf("the workspace's operations sandbox is container %s (runsc --root %s)\n", id, root)

	data := make([]byte, mib<<20)
	for i := range data {
		data[i] = byte(i*131 + i/65521)
	}
	sum := sha256.Sum256(data)
	local := filepath.Join(d.tmp, "f.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		return err
	}
	ctx := context.Background()
	helmrWrite := func() (time.Duration, error) {
		t0 := time.Now()
		err := d.c.WriteFileFrom(ctx, d.ws, "f.bin", bytes.NewReader(data))
		return time.Since(t0), err
	}
	helmrRead := func() (time.Duration, error) {
		t0 := time.Now()
		got, err := d.c.ReadFileTo(ctx, d.ws, "f.bin", io.Discard)
		if err == nil && got != int64(len(data)) {
			err = fmt.Errorf("read %d bytes, want %d", got, len(data))
		}
		return time.Since(t0), err
	}
	bareWrite := func() (time.Duration, error) {
		f, err := os.Open(local)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		cmd := exec.Command(runsc, append(global, "exec", id, "sh", "-c", "cat > /workspace/bare.bin")...)
		cmd.Stdin = f
		return timed(cmd)
	}
	bareRead := func() (time.Duration, error) {
		cmd := exec.Command(runsc, append(global, "exec", id, "cat", "/workspace/f.bin")...)
		devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return 0, err
		}
		defer devnull.Close()
		cmd.Stdout = devnull
		return timed(cmd)
	}
	// One of each first, not counted: the file is in place for the
	// reads, and both sides are warm. Then check it arrived whole.
	if _, err := helmrWrite(); err != nil {
		return fmt.Errorf("write through the API: %w", err)
	}
	if err := sameInSandbox(ctx, d, sum); err != nil {
		return err
	}
	size := float64(len(data))
	hw, bw, err := interleave(n, helmrWrite, bareWrite)
	if err != nil {
		return fmt.Errorf("writes: %w", err)
	}
	hr, br, err := interleave(n, helmrRead, bareRead)
	if err != nil {
		return fmt.Errorf("reads: %w", err)
	}
	if err := sameInSandbox(ctx, d, sum); err != nil {
		return err
	}
	var back bytes.Buffer
	if _, err := d.c.ReadFileTo(ctx, d.ws, "f.bin", &back); err != nil || sha256.Sum256(back.Bytes()) != sum {
		return fmt.Errorf("the file read back after the measured writes differs (%d bytes, %v)", back.Len(), err)
	}
	fmt.Printf("\n%d MiB file, gVisor tier, n=%d per side (after one warm-up; Helmr and bare interleaved), median throughput\n", mib, n)
	report("write", size, hw, bw, "PUT /v1/workspaces/{id}/files", "runsc exec CONTAINER sh -c 'cat > FILE' < FILE")
	report("read", size, hr, br, "GET /v1/workspaces/{id}/files", "runsc exec CONTAINER cat FILE > /dev/null")
	return nil
}

// sameInSandbox checks that the sandbox sees f.bin as written.
func sameInSandbox(ctx context.Context, d *devEnv, sum [32]byte) error {
	res, err := d.c.Exec(ctx, d.ws, workspaces.ExecRequest{Argv: []string{"sha256sum", "f.bin"}})
	if err != nil || !strings.HasPrefix(res.Stdout, hex.EncodeToString(sum[:])) {
		return fmt.Errorf("the file written through the API differs in the sandbox: %q %v", res.Stdout, err)
	}
	return nil
}

// report prints one direction's figures and whether it met the target.
func report(what string, size float64, helmr, bare []time.Duration, helmrDesc, bareDesc string) {
	h, b := size/median(helmr).Seconds()/1e6, size/median(bare).Seconds()/1e6
	verdict := "MET"
	if h/b < target {
		verdict = "MISSED"
	}
	fmt.Printf("  %-5s helmr: %-44s %8.1f MB/s (median %s)\n", what, helmrDesc, h, median(helmr).Round(time.Millisecond))
	fmt.Printf("  %-5s bare:  %-44s %8.1f MB/s (median %s)\n", "", bareDesc, b, median(bare).Round(time.Millisecond))
	fmt.Printf("  %-5s ratio helmr/bare %.2fx; target >= %.1fx: %s\n", "", h/b, target, verdict)
}

// devEnv is a helmr dev on the gvisor tier with bench/exec/project
// deployed and a workspace of its task whose operations sandbox is up.
type devEnv struct {
	dev     *testenv.Dev
	c       *client.Client
	ws      string
	dataDir string
	tmp     string
}

// startWorkspace starts helmr dev with a fresh data dir, deploys
// bench/exec/project (one task with a sandbox), creates a workspace of
// its task and runs one exec in it, which starts its sandbox.
func startWorkspace(bin string) (*devEnv, error) {
	tmp, err := os.MkdirTemp("", "helmr-bench-files-")
	if err != nil {
		return nil, err
	}
	d := &devEnv{tmp: tmp, dataDir: filepath.Join(tmp, "data")}
	env := append(os.Environ(), "HELMR_DATA_DIR="+d.dataDir, "HELMR_PROFILE="+filepath.Join(tmp, "profile.json"),
		"HELMR_ADDR=127.0.0.1:0", "HELMR_CACHE_DIR="+testenv.CacheDir(), "HELMR_PROJECT=", "HELMR_URL=",
		"HELMR_RUNTIME=gvisor", "HELMR_WARM=0", "HELMR_API_KEY=", "HELMR_OWNER_TOKEN=", "HELMR_OWNER_TOKEN_FILE=")
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
	if _, err := d.c.Exec(ctx, d.ws, workspaces.ExecRequest{Argv: []string{"true"}}); err != nil {
		d.close()
		return nil, fmt.Errorf("first exec (starts the workspace's sandbox): %w", err)
	}
	return d, nil
}

func (d *devEnv) close() {
	if d.dev != nil {
		d.dev.Stop()
	}
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

// interleave runs n rounds of helmr and bare, alternating which goes
// first, so that drift on the host weighs on both alike.
func interleave(n int, helmr, bare func() (time.Duration, error)) (h, b []time.Duration, err error) {
	for i := range n {
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
		if i%2 == 1 {
			d1, d2 = d2, d1
		}
		h, b = append(h, d1), append(b, d2)
	}
	return h, b, nil
}

// timed runs cmd and returns how long it took from start to exit.
func timed(cmd *exec.Cmd) (time.Duration, error) {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t0 := time.Now()
	err := cmd.Run()
	dt := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("%s: %v: %s", strings.Join(cmd.Args, " "), err, stderr.String())
	}
	return dt, nil
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
