package postgres

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/testenv"
	"github.com/helmr/helmr/internal/workers"
)

// TestConnectionsGone: the server ends every connection of the store's
// pool (as it does when it restarts: SQLSTATE 57P01) while they are
// warm; the reads and writes that follow land on a fresh connection
// instead of failing.
func TestConnectionsGone(t *testing.T) {
	ctx := t.Context()
	u, err := url.Parse(testenv.PostgresSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	app := fmt.Sprintf("helmr-gone-%d", time.Now().UnixNano())
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	s, err := Open(ctx, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{{ID: "a", Module: "m.mjs", Export: "a", HasRun: true}}},
		Files:    map[string][]byte{"m.mjs": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	// Warm several connections at once.
	busy := func() []error {
		var mu sync.Mutex
		var errs []error
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				var err error
				if i%2 == 0 {
					_, err = s.ListWorkers(ctx, time.Time{})
				} else {
					err = s.UpsertWorker(ctx, workers.Worker{ID: fmt.Sprintf("w%d", i), LastSeen: time.Now()})
				}
				if err == nil {
					_, err = s.GetRun(ctx, "run_none")
					if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
						err = fmt.Errorf("GetRun: %w", err)
					} else {
						err = nil
					}
				}
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
		}
		wg.Wait()
		return errs
	}
	busy()
	cfg := s.conn.Copy()
	cfg.RuntimeParams["application_name"] = app + "-admin"
	admin := sql.OpenDB(stdlib.GetConnector(*cfg))
	defer admin.Close()
	var ended int
	if err := admin.QueryRowContext(ctx, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	if ended == 0 {
		t.Fatal("no connection of the store's pool to end")
	}
	for _, err := range busy() {
		if err != nil {
			t.Errorf("after the server ended %d connections: %v", ended, err)
		}
	}
	// Once more, for a transaction.
	if err := admin.QueryRowContext(ctx, `SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&ended); err != nil || ended == 0 {
		t.Fatalf("end the pool's connections again: %d, %v", ended, err)
	}
	if _, err := s.CreateDeployment(ctx, deployments.Deployment{Project: "p", Env: "dev",
		Manifest: deployments.Manifest{Project: "p", Tasks: []deployments.TaskManifest{{ID: "a", Module: "m.mjs", Export: "a", HasRun: true}}},
		Files:    map[string][]byte{"m.mjs": []byte("y")}}); err != nil {
		t.Errorf("a transaction after the connections were ended: %v", err)
	}
}
