// Command auth measures what authentication and grant checks cost the
// API: the request throughput of one read endpoint (GET /v1/runs/{id})
// with a scoped API key checked as in production (bearer parsing, key
// lookup through the verified-key cache, SHA-256 of the secret compared in
// constant time, expiry and revocation, the grant, the run's project
// environment), against a baseline measured in the same run: the same
// server and store whose authenticator accepts any bearer without looking
// at it. Rounds alternate between the two so that drift on a shared
// machine hits both; it prints the median ratio of adjacent rounds and the
// ratio of each side's best round (interference only ever slows a round).
// It reports HTTP over loopback (concurrent clients) and in-process
// handler calls. Run: go run ./bench/auth
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/httpapi"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
)

func main() {
	rounds := flag.Int("rounds", 40, "pairs of rounds (with and without auth, alternating)")
	round := flag.Duration("round", 300*time.Millisecond, "length of one HTTP round")
	clients := flag.Int("clients", 4, "concurrent HTTP clients")
	calls := flag.Int("calls", 3000, "in-process handler calls per round")
	flag.Parse()
	if err := run(*rounds, *round, *clients, *calls); err != nil {
		fmt.Fprintln(os.Stderr, "auth:", err)
		os.Exit(1)
	}
}

// allowAll is the baseline's authenticator: every bearer is the owner.
type allowAll struct{}

func (allowAll) Authenticate(context.Context, string) (apikeys.Principal, error) {
	return apikeys.Principal{Owner: true}, nil
}

func run(rounds int, round time.Duration, clients, calls int) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "helmr-auth-bench-")
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
	r, _, err := svc.Trigger(ctx, runs.TriggerRequest{Project: "bench", Env: "dev", TaskID: "t", Payload: json.RawMessage(`{"n":1}`)})
	if err != nil {
		return err
	}
	keys := apikeys.NewService(st, apikeys.NewOwnerToken(), log)
	_, key, err := keys.Create(ctx, apikeys.CreateRequest{Project: "bench", Env: "dev", Grants: []string{"runs:read"}})
	if err != nil {
		return err
	}
	authed := httpapi.New(httpapi.Config{Runs: svc, Deployments: st, Logger: log, APIKeys: keys})
	open := httpapi.New(httpapi.Config{Runs: svc, Deployments: st, Logger: log, Authenticator: allowAll{}})
	path := "/v1/runs/" + r.ID

	// Both must answer 200 before anything is timed.
	for _, h := range []http.Handler{authed, open} {
		if code := call(h, path, key); code != http.StatusOK {
			return fmt.Errorf("GET %s = %d, want 200", path, code)
		}
	}

	authSrv, openSrv := httptest.NewServer(authed), httptest.NewServer(open)
	defer authSrv.Close()
	defer openSrv.Close()
	var httpAuth, httpOpen, procAuth, procOpen []float64
	for i := 0; i < rounds; i++ {
		// Odd rounds go in the other order, so neither side is always first.
		for j := 0; j < 2; j++ {
			if (i+j)%2 == 0 {
				a, err := httpRate(authSrv.URL+path, key, clients, round)
				if err != nil {
					return err
				}
				httpAuth = append(httpAuth, a)
				procAuth = append(procAuth, procRate(authed, path, key, calls))
			} else {
				o, err := httpRate(openSrv.URL+path, key, clients, round)
				if err != nil {
					return err
				}
				httpOpen = append(httpOpen, o)
				procOpen = append(procOpen, procRate(open, path, key, calls))
			}
		}
	}
	fmt.Printf("GET /v1/runs/{id} on SQLite: %d pairs of adjacent rounds, with auth / without\n", rounds)
	report := func(what string, auth, open []float64) {
		ratios := make([]float64, len(auth))
		for i := range auth {
			ratios[i] = auth[i] / open[i]
		}
		slices.Sort(ratios)
		r := median(ratios)
		best := slices.Max(auth) / slices.Max(open)
		fmt.Printf("  %s\n    with auth %.0f req/s, without %.0f req/s (medians); pair ratio median %.3f [quartiles %.3f..%.3f]; best rounds %.0f vs %.0f, ratio %.3f\n    overhead: %.1f%% by the median pair, %.1f%% by the best rounds (target <= 5%%)\n",
			what, median(auth), median(open), r, ratios[len(ratios)/4], ratios[3*len(ratios)/4], slices.Max(auth), slices.Max(open), best, 100*(1-r), 100*(1-best))
	}
	report(fmt.Sprintf("HTTP, loopback, %d clients:", clients), httpAuth, httpOpen)
	report("in-process handler, 1 goroutine:", procAuth, procOpen)

	// The check alone, which adjacent rounds bound only within their noise.
	const n = 200000
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := keys.Authenticate(ctx, key); err != nil {
			return err
		}
	}
	per := time.Since(start) / n
	req := time.Duration(float64(time.Second) / median(procOpen))
	fmt.Printf("  Authenticate alone: %v per call, %.1f%% of an unauthenticated in-process request (%v)\n",
		per, 100*float64(per)/float64(req), req.Round(time.Microsecond/10))
	return nil
}

func call(h http.Handler, path, key string) int {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code
}

// procRate is handler calls per second, in this goroutine.
func procRate(h http.Handler, path, key string, n int) float64 {
	start := time.Now()
	for i := 0; i < n; i++ {
		call(h, path, key)
	}
	return float64(n) / time.Since(start).Seconds()
}

// httpRate is requests per second that clients keep-alive connections
// complete in d.
func httpRate(url, key string, clients int, d time.Duration) (float64, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	var n atomic.Int64
	var failed atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := c.Do(req)
				if err != nil {
					failed.Store(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Store(fmt.Errorf("status %d", resp.StatusCode))
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	return float64(n.Load()) / d.Seconds(), nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
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
