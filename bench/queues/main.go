// Command queues measures what queue concurrency limits cost the lease
// path: the time from a slot freeing (a started run ends) to the next
// run's lease, with 1,000 queued runs spread over 10 queues limited to 5
// slots each (every other queue full, so the lease must pass over them),
// against the same with 1,000 runs in one unconstrained queue, measured
// in the same run on the embedded SQLite store, and on PostgreSQL when
// HELMR_TEST_DATABASE_URL is set (scripts/postgres-test.sh). The issue's
// target is a ratio under 1.5. Run: go run ./bench/queues [-n 300]
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/postgres"
	"github.com/helmr/helmr/internal/store/sqlite"
	"github.com/helmr/helmr/internal/workers"
)

const (
	queued   = 1000
	nQueues  = 10
	perQueue = 5
)

var offer = workers.Capabilities{CPUs: 64, MemoryBytes: 1 << 40}

// benchStore is a store engine: the run store and Close.
type benchStore interface {
	runs.Store
	Close() error
}

func main() {
	n := flag.Int("n", 300, "slot frees timed per case")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "helmr-queues-bench-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	type engine struct {
		name string
		open func(project string) (benchStore, error)
	}
	engines := []engine{{"SQLite", func(p string) (benchStore, error) { return sqlite.Open(ctx, filepath.Join(dir, p+".db"), log) }}}
	if url := os.Getenv("HELMR_TEST_DATABASE_URL"); url != "" {
		engines = append(engines, engine{"PostgreSQL", func(p string) (benchStore, error) {
			u, err := freshDatabase(ctx, url, p)
			if err != nil {
				return nil, err
			}
			return postgres.Open(ctx, u, log)
		}})
	}
	fmt.Printf("queue scheduling: slot freed -> next run leased, %d queued runs, median of %d\n", queued, *n)
	for _, e := range engines {
		single, err := measure(ctx, e.open, "single", 1, 0, *n)
		if err != nil {
			fail(err)
		}
		limited, err := measure(ctx, e.open, "limited", nQueues, perQueue, *n)
		if err != nil {
			fail(err)
		}
		fmt.Printf("  %-10s one unconstrained queue %7.3f ms   %d queues limited to %d %7.3f ms   ratio %.2f (target < 1.5)\n",
			e.name, ms(single), nQueues, perQueue, ms(limited), float64(limited)/float64(single))
	}
}

// measure fills a fresh project with queued runs over nq queues (limit
// per queue, 0: none), starts what the limits allow, then n times ends
// the oldest started run and times the lease that follows.
func measure(ctx context.Context, open func(string) (benchStore, error), name string, nq, limit, n int) (time.Duration, error) {
	project := fmt.Sprintf("bench-%s-%d", name, time.Now().UnixNano())
	st, err := open(project)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	for q := range nq {
		if limit > 0 {
			if err := st.DeclareQueue(ctx, runs.Queue{Project: project, Env: "dev", Name: fmt.Sprintf("q%d", q), ConcurrencyLimit: limit}); err != nil {
				return 0, err
			}
		}
	}
	now := time.Now()
	for i := range queued + n {
		r := runs.Run{Project: project, Env: "dev", TaskID: "t", DeploymentID: "dep", DeploymentVersion: 1, MaxDurationSec: 600,
			Queue: fmt.Sprintf("q%d", i%nq), CreatedAt: now.Add(time.Duration(i) * time.Microsecond), Payload: []byte("{}")}
		if _, _, err := st.CreateRun(ctx, r); err != nil {
			return 0, err
		}
	}
	var started []string
	for {
		r, err := st.LeaseRun(ctx, "bench", offer, time.Now(), 0)
		if err != nil {
			break
		}
		started = append(started, r.ID)
		if limit == 0 && len(started) == nQueues*perQueue {
			break // as many running as the limited case
		}
	}
	var took []time.Duration
	for range n {
		id := started[0]
		started = started[1:]
		if _, _, err := st.Transition(ctx, id, runs.Transition{From: []runs.Status{runs.StatusStarting}, To: runs.StatusCompleted, Time: time.Now()}); err != nil {
			return 0, err
		}
		t0 := time.Now()
		r, err := st.LeaseRun(ctx, "bench", offer, time.Now(), 0)
		took = append(took, time.Since(t0))
		if err != nil {
			return 0, fmt.Errorf("%s: no run leased after a slot freed: %w", name, err)
		}
		started = append(started, r.ID)
	}
	slices.Sort(took)
	return took[len(took)/2], nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func fail(err error) {
	if !errors.Is(err, sql.ErrNoRows) {
		fmt.Fprintln(os.Stderr, "queues:", err)
	}
	os.Exit(1)
}

// freshDatabase creates database name (made safe) on the server of url
// and returns url naming it: each case starts from an empty store.
func freshDatabase(ctx context.Context, url, name string) (string, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return "", err
	}
	defer db.Close()
	name = "bench_" + strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(name))
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	u, err := neturl.Parse(url)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}
