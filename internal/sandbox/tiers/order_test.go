package tiers

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/sandboxtest"
	"github.com/helmr/helmr/internal/testenv"
)

// agentPath is the helmr-agent built once for this package (TestMain).
var agentPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.MainWithAgent(m, &agentPath)) }

// testHost is a Host for the tests' agent and the cache's runsc, with its
// state under root.
func testHost(root, instance string) Host {
	return Host{
		StateRoot: root, Instance: instance, Agent: agentPath,
		Runsc: os.Getenv("HELMR_RUNSC"), CacheDir: testenv.CacheDir(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// requireTiers skips (fails on CI) unless every built tier can run here.
func requireTiers(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	for _, name := range Built() {
		tr, _ := Lookup(name)
		s := probe(tr, testHost("/nonexistent", "probe"))
		testenv.Require(t, s.Available, fmt.Sprintf("the %s tier cannot run here: %s", name, s.Detail))
	}
}

// TestTierOrder is the regression test of tiers sharing a state root:
// each built tier runs a sandbox after each other one on a fresh root
// (gvisor then process, process then gvisor), and on a root an older
// Helmr made 0700.
func TestTierOrder(t *testing.T) {
	requireTiers(t)
	rootfs := sandboxtest.BaseRootFS(t)
	var orders [][]string
	for _, a := range Built() {
		for _, b := range Built() {
			if a != b {
				orders = append(orders, []string{a, b})
			}
		}
	}
	for _, order := range orders {
		t.Run(strings.Join(order, "-then-"), func(t *testing.T) {
			root := testenv.StateRoot(t)
			for _, name := range order {
				runOne(t, name, root, rootfs)
			}
		})
	}
	for _, name := range Built() {
		t.Run(name+"-on-a-0700-root", func(t *testing.T) {
			root := testenv.StateRoot(t)
			if err := os.Mkdir(root, 0o700); err != nil {
				t.Fatal(err)
			}
			runOne(t, name, root, rootfs)
		})
	}
}

// runOne starts tier name's runtime with its state under root, runs a
// process in a sandbox, and ends both.
func runOne(t *testing.T, name, root, rootfs string) {
	t.Helper()
	tr, _ := Lookup(name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt, err := tr.New(ctx, testHost(root, "w-order"))
	if err != nil {
		t.Fatalf("%s: New() = %v", name, err)
	}
	if c, ok := rt.(interface{ Close(context.Context) error }); ok {
		defer func() {
			if err := c.Close(context.Background()); err != nil {
				t.Errorf("%s: Close() = %v", name, err)
			}
		}()
	}
	spec := sandbox.Spec{ID: "order-" + name, RootLayers: []string{rootfs}, WorkspaceHost: t.TempDir(), UID: 1000, GID: 1000}
	sb, err := rt.Start(ctx, spec)
	if err != nil {
		t.Fatalf("%s: Start() = %v", name, err)
	}
	defer func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("%s: Destroy() = %v", name, err)
		}
	}()
	var out strings.Builder
	st, err := sb.Exec(ctx, sandbox.ExecRequest{
		Argv:     []string{"sh", "-c", "echo ran as $(id -u) > out && cat out"},
		Env:      []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		OnOutput: func(_ string, b []byte) { out.Write(b) },
	})
	if err != nil || st.Code != 0 || out.String() != "ran as 1000\n" {
		t.Errorf("%s: Exec() = %+v, %v, output %q; want ran as 1000", name, st, err, out.String())
	}
	if dirs, _ := filepath.Glob(filepath.Join(root, "*", "w-order")); len(dirs) == 0 {
		t.Errorf("%s: no instance state under the state root %s", name, root)
	}
}
