package gvisor

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
	"github.com/helmr/helmr/internal/testenv"
)

// The start benchmarks time node -e 'console.log(1)' to its first output
// line on the base root filesystem: bare `runsc run` of that root against
// Start + Exec of this tier (also reporting Start alone and Destroy). Run
// with -benchtime=10x; they report medians in ms.

var nodeHello = []string{"/usr/local/bin/node", "-e", "console.log(1)"}

func BenchmarkBareRunsc(b *testing.B) {
	rt := newRuntime(b)
	rootfs := testenv.BaseRootfs(b)
	bundle := b.TempDir()
	spec := ociSpec{
		Version: "1.0.2",
		Process: ociProcess{Args: nodeHello, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Cwd: "/"},
		Root:    ociRoot{Path: rootfs, Readonly: true},
		Linux:   ociLinux{Namespaces: []ociNamespace{{Type: "pid"}, {Type: "network"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}}},
	}
	data, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		b.Fatal(err)
	}
	var times []time.Duration
	for i := 0; b.Loop(); i++ {
		id := "bare-" + randomID(b)
		cmd := exec.Command(rt.cfg.RunscPath, append(rt.globalArgs(), "--network", "none", "run", "--bundle", bundle, id)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		times = append(times, time.Since(began))
		if err != nil || line != "1\n" {
			b.Fatalf("runsc run node: first line %q, %v", line, err)
		}
		b.StopTimer()
		if err := cmd.Wait(); err != nil {
			b.Fatalf("runsc run node: %v", err)
		}
		_ = rt.deleteContainer(context.Background(), id)
		b.StartTimer()
	}
	b.ReportMetric(median(times), "median-ms")
}

func BenchmarkStartExec(b *testing.B) { benchStartExec(b, nil) }

// BenchmarkStartExecNetwork is BenchmarkStartExec with the default egress
// policy's interface (the user-space network and runsc's --network=sandbox).
func BenchmarkStartExecNetwork(b *testing.B) {
	benchStartExec(b, &network.Config{Policy: network.Policy{Mode: network.Open}})
}

func benchStartExec(b *testing.B, nc *network.Config) {
	rt := newRuntime(b)
	rootfs := testenv.BaseRootfs(b)
	var times, starts, destroys []time.Duration
	for b.Loop() {
		spec := sandbox.Spec{ID: "bench-" + randomID(b), RootLayers: []string{rootfs}, WorkspaceHost: b.TempDir(), UID: 1000, GID: 1000, Network: nc}
		began := time.Now()
		var first time.Duration
		sb, err := rt.Start(context.Background(), spec)
		if err != nil {
			b.Fatal(err)
		}
		starts = append(starts, time.Since(began))
		st, err := sb.Exec(context.Background(), sandbox.ExecRequest{
			Argv: nodeHello,
			OnOutput: func(string, []byte) {
				if first == 0 {
					first = time.Since(began)
				}
			},
		})
		if err != nil || st.Code != 0 || first == 0 {
			b.Fatalf("Exec(node) = %+v, %v, first output after %v", st, err, first)
		}
		times = append(times, first)
		b.StopTimer()
		destroying := time.Now()
		if err := sb.Destroy(context.Background()); err != nil {
			b.Fatal(err)
		}
		destroys = append(destroys, time.Since(destroying))
		b.StartTimer()
	}
	b.ReportMetric(median(times), "median-ms")
	b.ReportMetric(median(starts), "start-median-ms")
	b.ReportMetric(median(destroys), "destroy-median-ms")
}

func median(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2]) / float64(time.Millisecond)
}

func randomID(tb testing.TB) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}
