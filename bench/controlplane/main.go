// Command controlplane measures the control plane on the embedded SQLite
// store: run creations per second through the run service (task lookup,
// payload checks, insert with the first status event), and stored log events
// per second in the batches a worker sends. As a baseline measured in the
// same run it times the same number of bare single-row INSERT transactions
// (and batched bare inserts) on the same database settings, and prints the
// ratios. Run: go run ./bench/controlplane
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
	"github.com/helmr/helmr/internal/workers"
)

func main() {
	nRuns := flag.Int("runs", 5000, "runs to create")
	nEvents := flag.Int("events", 200000, "log events to store")
	batch := flag.Int("batch", 500, "log events per append")
	flag.Parse()
	if err := run(*nRuns, *nEvents, *batch); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func run(nRuns, nEvents, batch int) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "helmr-cp-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(dir, "helmr.db"), log)
	if err != nil {
		return err
	}
	defer st.Close()
	svc := runs.NewService(st, st, st, runs.NewBroker(), log)
	if _, err := st.CreateDeployment(ctx, benchDeployment()); err != nil {
		return err
	}
	// A connected worker that fits every run, as in normal operation (with
	// none, each run also records why it waits).
	if err := st.UpsertWorker(ctx, workers.Worker{ID: "bench", LastSeen: time.Now(),
		Capabilities: workers.Capabilities{CPUs: 64, MemoryBytes: 1 << 40, Slots: 4}}); err != nil {
		return err
	}

	start := time.Now()
	var last runs.Run
	for i := 0; i < nRuns; i++ {
		last, _, err = svc.Trigger(ctx, runs.TriggerRequest{Project: "bench", Env: "dev", TaskID: "t", Payload: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
		if err != nil {
			return err
		}
	}
	runRate := float64(nRuns) / time.Since(start).Seconds()

	lines := make([]runs.LogData, batch)
	for i := range lines {
		lines[i] = runs.LogData{Stream: "stdout", Line: fmt.Sprintf("log line %d of a busy task, with some typical length to it", i)}
	}
	start = time.Now()
	for n := 0; n < nEvents; n += batch {
		if err := svc.AppendLogs(ctx, last.ID, lines, time.Now()); err != nil {
			return err
		}
	}
	eventRate := float64(nEvents) / time.Since(start).Seconds()

	rowRate, batchRate, err := baseline(filepath.Join(dir, "baseline.db"), nRuns, nEvents, batch)
	if err != nil {
		return err
	}
	fmt.Printf("control plane on SQLite (one goroutine)\n")
	fmt.Printf("  run creations:  %8.0f /s  (target >= 2000)   bare 1-row INSERT txns: %8.0f /s  ratio %.2f\n", runRate, rowRate, runRate/rowRate)
	fmt.Printf("  log events:     %8.0f /s  (target >= 50000)  bare batched INSERTs:   %8.0f /s  ratio %.2f (batch %d)\n", eventRate, batchRate, eventRate/batchRate, batch)
	return nil
}

func benchDeployment() deployments.Deployment {
	return deployments.Deployment{Project: "bench", Env: "dev",
		Manifest: deployments.Manifest{Project: "bench", Tasks: []deployments.TaskManifest{{
			ID: "t", Module: "bundles/t.mjs", Export: "t", HasRun: true,
			Sandbox: &deployments.SandboxManifest{Name: "s", Image: &deployments.ImageManifest{Name: "i",
				Steps: []deployments.Step{{Kind: "from", Ref: "helmr/bookworm-node22"}}}},
		}}},
		Files: map[string][]byte{"bundles/t.mjs": []byte("export {}")},
	}
}

// baseline times bare inserts with the store's pragmas: one row per
// transaction (like a run creation) and batched rows (like log appends).
func baseline(path string, nRows, nEvents, batch int) (float64, float64, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t (id TEXT PRIMARY KEY, data TEXT); CREATE TABLE e (run TEXT, seq INTEGER, data TEXT, PRIMARY KEY (run, seq)) WITHOUT ROWID`); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	for i := 0; i < nRows; i++ {
		tx, err := db.Begin()
		if err != nil {
			return 0, 0, err
		}
		if _, err := tx.Exec(`INSERT INTO t VALUES (?, ?)`, fmt.Sprint("r", i), `{"i":1}`); err != nil {
			return 0, 0, err
		}
		if err := tx.Commit(); err != nil {
			return 0, 0, err
		}
	}
	rowRate := float64(nRows) / time.Since(start).Seconds()
	start = time.Now()
	for n := 0; n < nEvents; n += batch {
		tx, err := db.Begin()
		if err != nil {
			return 0, 0, err
		}
		stmt, err := tx.Prepare(`INSERT INTO e VALUES ('r', ?, ?)`)
		if err != nil {
			return 0, 0, err
		}
		for i := 0; i < batch; i++ {
			if _, err := stmt.Exec(n+i, `{"stream":"stdout","line":"log line"}`); err != nil {
				return 0, 0, err
			}
		}
		stmt.Close()
		if err := tx.Commit(); err != nil {
			return 0, 0, err
		}
	}
	return rowRate, float64(nEvents) / time.Since(start).Seconds(), nil
}
