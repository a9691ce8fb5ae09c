package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/testenv"
)

// cluster is a multi-host Helmr started by scripts/cluster.sh: what its
// `up` exported, and the script to drive it with.
type cluster struct {
	t   *testing.T
	dir string
	// exports are the variables `up` printed (HELMR_URL, HELMR_API_KEY,
	// HELMR_CLUSTER_*).
	exports map[string]string
	env     []string // the script's environment
	down    bool
}

// upCluster starts a cluster in a fresh directory with the script's up
// flags (--workers, --replicas, --runtime) and takes it down when t ends.
// env adds settings the replicas and workers start with (HELMR_WORKER_TTL,
// HELMR_HEARTBEAT...: the script's pass-through list).
func upCluster(t *testing.T, flags []string, env ...string) *cluster {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.BaseRootfs(t)
	bin := testenv.Binaries(t)
	// The process tier's sandboxes walk to their state below the cluster
	// directory: its parents must be searchable by others (t.TempDir
	// makes them 0700).
	tmp := t.TempDir()
	for _, p := range []string{tmp, filepath.Dir(tmp)} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	c := &cluster{t: t, dir: filepath.Join(tmp, "c")}
	c.env = append(os.Environ(), "HELMR_BIN="+filepath.Join(bin, "helmr"), "HELMR_CACHE_DIR="+testenv.CacheDir(), "HELMR_CLUSTER_DIR="+c.dir)
	c.env = append(c.env, env...)
	t.Cleanup(func() {
		if t.Failed() {
			c.logTails()
		}
		if !c.down {
			c.script("down")
		}
	})
	out := c.script(append([]string{"up", "--dir", c.dir}, flags...)...)
	c.exports = map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if !ok || !strings.HasPrefix(sc.Text(), "export ") {
			t.Fatalf("cluster.sh up printed %q on stdout, want only export lines", sc.Text())
		}
		c.exports[k] = strings.Trim(v, "'")
	}
	for _, k := range []string{"HELMR_CLUSTER_DIR", "HELMR_URL", "HELMR_API_KEY", "HELMR_CLUSTER_WORKERS", "HELMR_CLUSTER_REPLICAS",
		"HELMR_CLUSTER_DATABASE_URL", "HELMR_CLUSTER_REPLICA_URLS"} {
		if c.exports[k] == "" {
			t.Fatalf("cluster.sh up exported no %s: %v", k, c.exports)
		}
	}
	return c
}

// script runs scripts/cluster.sh with args and returns its stdout,
// failing t if it fails.
func (c *cluster) script(args ...string) string {
	c.t.Helper()
	out, errOut, err := c.tryScript(args...)
	if err != nil {
		c.t.Fatalf("cluster.sh %s: %v\nstderr:\n%s", strings.Join(args, " "), err, errOut)
	}
	if args[0] == "down" {
		c.down = true
	}
	return out
}

// tryScript runs scripts/cluster.sh with args: stdout, stderr, error.
func (c *cluster) tryScript(args ...string) (string, string, error) {
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "scripts", "cluster.sh"), args...)
	cmd.Env = c.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// api is a client of the cluster's load balancer with the owner token.
func (c *cluster) api() *client.Client {
	return client.New(c.exports["HELMR_URL"], c.exports["HELMR_API_KEY"])
}

// cli is a dev whose CLI calls go to the cluster's load balancer.
func (c *cluster) cli(bin string) *dev {
	env := append(os.Environ(), "HELMR_URL="+c.exports["HELMR_URL"], "HELMR_API_KEY="+c.exports["HELMR_API_KEY"],
		"HELMR_PROFILE="+filepath.Join(c.t.TempDir(), "profile.json"), "HELMR_PROJECT=", "HELMR_CACHE_DIR="+testenv.CacheDir())
	return &dev{t: c.t, bin: bin, env: env, url: c.exports["HELMR_URL"], token: c.exports["HELMR_API_KEY"], api: c.api()}
}

// status is the script's status: part name to "up" or "down".
func (c *cluster) status() map[string]string {
	c.t.Helper()
	st := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(c.script("status")), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			c.t.Fatalf("cluster.sh status line %q, want name pid up|down", line)
		}
		st[f[0]] = f[2]
	}
	return st
}

// workerPID is worker k's pid (cluster.sh pids worker k).
func (c *cluster) workerPID(k int) int {
	c.t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(c.script("pids", "worker", strconv.Itoa(k))))
	if err != nil {
		c.t.Fatalf("cluster.sh pids worker %d: %v", k, err)
	}
	return pid
}

// hash is the script's name for the cluster's namespaces and links.
func (c *cluster) hash() string {
	h := sha256.Sum256([]byte(c.dir))
	return hex.EncodeToString(h[:])[:6]
}

// leftovers lists what of the cluster is still on the machine: its
// directory, mounts below it, its network namespaces and links, and
// processes whose command line names a path below it.
func (c *cluster) leftovers() []string {
	var left []string
	if _, err := os.Stat(c.dir); err == nil {
		left = append(left, "directory "+c.dir)
	}
	for _, m := range testenv.MountsUnder(c.dir) {
		left = append(left, "mount "+m)
	}
	h := c.hash()
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "helmr-"+h+"-") {
				left = append(left, "netns "+e.Name())
			}
		}
	}
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "hb"+h) || strings.HasPrefix(e.Name(), "hv"+h) {
				left = append(left, "link "+e.Name())
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		environ, _ := os.ReadFile(filepath.Join(p, "environ"))
		if bytes.Contains(cmdline, []byte(c.dir+"/")) || bytes.Contains(environ, []byte("HELMR_DATA_DIR="+c.dir+"/")) {
			left = append(left, fmt.Sprintf("process %s %q", filepath.Base(p), bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return left
}

// logTails logs the end of each process's log.
func (c *cluster) logTails() {
	logs, _ := filepath.Glob(filepath.Join(c.dir, "logs", "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		c.t.Logf("--- %s:\n%s", filepath.Base(l), data)
	}
}

// apiRequests sums a replica's API request counts (its /metrics), probes
// left out.
func apiRequests(t *testing.T, metricsURL string) int {
	t.Helper()
	resp, err := http.Get(metricsURL + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", metricsURL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "helmr_http_request_duration_seconds_count{") || strings.Contains(line, "z\"") { // /healthz, /readyz
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			n += int(v)
		}
	}
	return n
}

// TestClusterScript brings up the multi-host topology with
// scripts/cluster.sh (two replicas behind the balancer, two workers each
// in its own network namespace, the process tier), runs tasks through
// the balancer, kills and restarts a worker and a replica, restarts
// PostgreSQL, and takes it down: nothing of it may be left.
func TestClusterScript(t *testing.T) {
	_, err := exec.LookPath("node")
	testenv.Require(t, err == nil, "deploy needs node on PATH")
	c := upCluster(t, []string{"--workers", "2", "--replicas", "2", "--runtime", "process"})
	if got := c.exports["HELMR_CLUSTER_WORKERS"] + "/" + c.exports["HELMR_CLUSTER_REPLICAS"]; got != "2/2" {
		t.Errorf("exported workers/replicas = %s, want 2/2", got)
	}
	d := c.cli(testenv.Binaries(t))
	d.deploy("examples/hello")
	runHellos := func(n int, what string) {
		t.Helper()
		var ids []string
		for i := range n {
			ids = append(ids, d.trigger("hello", "hello", fmt.Sprintf(`{"name":"c%d"}`, i)).ID)
		}
		for i, id := range ids {
			r := d.waitDone(id, 2*time.Minute)
			if r.Status != runs.StatusCompleted || !strings.Contains(string(r.Output), fmt.Sprintf("Hello, c%d!", i)) {
				t.Fatalf("%s: run %s = %s %+v output %s, want COMPLETED with its greeting", what, id, r.Status, r.Error, r.Output)
			}
		}
	}
	runHellos(4, "first runs")

	// Each worker is on a host of its own: the host name of its network
	// and UTS namespace starts its worker id.
	var ws struct {
		Workers []struct {
			ID   string `json:"id"`
			Live bool   `json:"live"`
		} `json:"workers"`
	}
	if st, body := d.get("/v1/workers?project=hello"); st != http.StatusOK || json.Unmarshal(body, &ws) != nil {
		t.Fatalf("GET /v1/workers = %d %s", st, body)
	}
	hosts := map[string]bool{}
	for _, w := range ws.Workers {
		if w.Live {
			hosts[strings.SplitN(w.ID, "-", 2)[0]] = true
		}
	}
	if !hosts["h1"] || !hosts["h2"] || len(hosts) != 2 {
		t.Errorf("live workers %+v, want one on host h1 and one on h2", ws.Workers)
	}

	// Both replicas served API requests through the balancer.
	for _, m := range strings.Fields(c.exports["HELMR_CLUSTER_REPLICA_METRICS_URLS"]) {
		if n := apiRequests(t, m); n == 0 {
			t.Errorf("replica with metrics at %s served no API request", m)
		}
	}

	// kill -9 a worker, start it again on the same data dir.
	pid := c.workerPID(1)
	c.script("kill", "worker", "1")
	if st := c.status(); st["worker-1"] != "down" || st["worker-2"] != "up" {
		t.Errorf("status after kill worker 1 = %v, want worker-1 down, worker-2 up", st)
	}
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(data), ") Z ") {
		t.Errorf("worker 1 (pid %d) still runs after kill: %s", pid, data)
	}
	if _, _, err := c.tryScript("kill", "worker", "1"); err == nil {
		t.Error("kill of a worker that is down succeeded, want an error")
	}
	c.script("start", "worker", "1")
	if c.workerPID(1) == pid {
		t.Error("worker 1 started again with the killed worker's pid")
	}
	// kill -9 a replica: the balancer sends everything to the other.
	c.script("kill", "replica", "1")
	runHellos(2, "runs with replica 1 down")
	c.script("start", "replica", "1")
	c.script("restart", "postgres")
	// The replicas' pooled connections to the old server fail once each
	// (a request on one answers 500: reported, not this test's subject);
	// wait until both replicas answer again.
	for _, u := range strings.Fields(c.exports["HELMR_CLUSTER_REPLICA_URLS"]) {
		api := client.New(u, c.exports["HELMR_API_KEY"])
		waitFor(t, 30*time.Second, func() bool {
			errs := make(chan error, 5)
			for range 5 {
				go func() { _, err := api.ListTasks(t.Context(), "hello", "dev"); errs <- err }()
			}
			ok := true
			for range 5 {
				ok = <-errs == nil && ok
			}
			return ok
		})
	}
	runHellos(2, "runs after the restarts")
	for name, s := range c.status() {
		if s != "up" {
			t.Errorf("after the restarts %s is %s, want up", name, s)
		}
	}
	if _, errOut, err := c.tryScript("up", "--dir", c.dir); err == nil || !strings.Contains(errOut, "is running") {
		t.Errorf("a second up on a running cluster = %v %q, want a refusal", err, errOut)
	}

	c.script("down")
	if left := c.leftovers(); len(left) > 0 {
		t.Errorf("after down the cluster left:\n%s", strings.Join(left, "\n"))
	}
}
