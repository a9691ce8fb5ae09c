// Command console measures the console against its targets (issue 16):
// the server time to render the first page of the runs list with 100,000
// runs in SQLite (target: under 50 ms median), next to the API's own GET
// /v1/runs for the same page in the same run (the baseline, and the
// ratio); and how long the run page of a run with 50,000 log lines takes
// in headless Chromium from navigation until its timeline shows the last
// line and a frame has been painted after it (target: under 1 s).
//
// It seeds the store directly through the store package, serves the
// control plane's handler in-process (on a loopback port for the browser),
// signs in as the owner and calls both routes with the session cookie,
// the same credentials a browser sends. The browser part runs
// console/e2e/bench/runpage.mjs (playwright-core driving Debian's
// chromium; scripts/setup.sh installs both). A route the console does not
// serve yet is reported as such, not timed.
//
// Run (from the repository root): go run ./bench/console
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
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/apikeys"
	"github.com/helmr/helmr/internal/deployments"
	"github.com/helmr/helmr/internal/httpapi"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/store/sqlite"
)

type options struct {
	runs, lines, samples, browserSamples int
	page, api, runPage                   string
	chromium, dataDir                    string
}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 100000, "runs to seed")
	flag.IntVar(&o.lines, "lines", 50000, "log lines of the run whose page the browser opens")
	flag.IntVar(&o.samples, "samples", 200, "timed requests per route (after warm-up)")
	flag.IntVar(&o.browserSamples, "browser-samples", 5, "navigations to the run page")
	flag.StringVar(&o.page, "page", "/runs?project=bench&env=dev", "the console's runs list (first page)")
	flag.StringVar(&o.api, "api", "/v1/runs?project=bench&env=dev", "the API's runs list, the baseline")
	flag.StringVar(&o.runPage, "run-page", "/runs/{id}", "the console's run page ({id}: the run with -lines log lines)")
	flag.StringVar(&o.chromium, "chromium", "/usr/bin/chromium", "the Chromium binary")
	flag.StringVar(&o.dataDir, "data", "", "keep the seeded database in this directory and reuse it on the next run with the same -runs and -lines (default: a temporary one)")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "console:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.runs < 1 || o.lines < 1 || o.samples < 1 || o.browserSamples < 1 {
		return fmt.Errorf("-runs, -lines, -samples and -browser-samples must be at least 1")
	}
	dir := o.dataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "helmr-console-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlite.Open(ctx, filepath.Join(dir, "helmr.db"), log)
	if err != nil {
		return err
	}
	defer st.Close()
	svc := runs.NewService(st, st, st, runs.NewBroker(), log)

	start := time.Now()
	big, seeded, err := seed(ctx, st, svc, o.runs, o.lines, dir)
	if err != nil {
		return err
	}
	if seeded {
		fmt.Printf("seeded %d runs and %d log lines in %s\n", o.runs, o.lines, time.Since(start).Round(time.Second))
	} else {
		fmt.Printf("reused the seeded database in %s\n", dir)
	}

	owner := apikeys.NewOwnerToken()
	h := handler(st, svc, owner, log)
	cookie, err := signIn(h, owner)
	if err != nil {
		return err
	}

	fmt.Printf("console on SQLite, %d runs, in-process handler, owner session\n", o.runs)
	apiMed, apiN, _, err := serverTime(h, o.api, cookie, o.samples)
	if err != nil {
		return fmt.Errorf("API %s: %w", o.api, err)
	}
	fmt.Printf("  API GET %s: median %v (%d samples, %d runs on the page)\n", o.api, ms(apiMed), o.samples, apiN)
	pageMed, _, body, err := serverTime(h, o.page, cookie, o.samples)
	switch {
	case err == errNotServed:
		fmt.Printf("  console runs page: not served yet (GET %s answers 404)\n", o.page)
	case err != nil:
		return fmt.Errorf("console %s: %w", o.page, err)
	default:
		verdict := "meets"
		if pageMed >= 50*time.Millisecond {
			verdict = "MISSES"
		}
		fmt.Printf("  console GET %s: median %v (%d samples); ratio to the API %.2f; %s the target < 50 ms\n",
			o.page, ms(pageMed), o.samples, float64(pageMed)/float64(apiMed), verdict)
		if !strings.Contains(body, big.ID) {
			fmt.Printf("  (the console's page does not show the newest run %s: is -page the runs list of project bench?)\n", big.ID)
		}
	}

	srv := httptest.NewServer(h)
	defer srv.Close()
	return runPage(ctx, o, srv.URL, strings.ReplaceAll(o.runPage, "{id}", big.ID), cookie, lastLine(o.lines))
}

// handler is the control plane's HTTP handler as helmr dev wires it for
// what the pages read: runs, deployments, owner sessions.
func handler(st *sqlite.Store, svc *runs.Service, owner string, log *slog.Logger) http.Handler {
	keys := apikeys.NewService(st, owner, log)
	return httpapi.New(httpapi.Config{Runs: svc, Deployments: st, Logger: log,
		APIKeys: keys, Sessions: apikeys.NewSessions(st, keys, 12*time.Hour, log)})
}

// signIn posts the owner credential to the sign-in form (/login, else
// /dev/login) and returns the session cookie.
func signIn(h http.Handler, owner string) (*http.Cookie, error) {
	for _, path := range []string{"/login", "/dev/login"} {
		form := url.Values{"credential": {owner}}.Encode()
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://"+req.Host)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code == http.StatusNotFound || w.Code == http.StatusMethodNotAllowed {
			continue
		}
		for _, c := range w.Result().Cookies() {
			if c.Name == httpapi.SessionCookie && c.Value != "" {
				return c, nil
			}
		}
		return nil, fmt.Errorf("sign in at %s = %d without a session cookie: %s", path, w.Code, w.Body.String())
	}
	return nil, fmt.Errorf("no sign-in form answered at /login or /dev/login")
}

var errNotServed = fmt.Errorf("not served")

// serverTime calls path n times (after warm-up) on h with the cookie and
// returns the median time to the full response, how many runs it held
// (for a JSON runs page) and the first response's body.
func serverTime(h http.Handler, path string, cookie *http.Cookie, n int) (time.Duration, int, string, error) {
	call := func() (*httptest.ResponseRecorder, time.Duration) {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.AddCookie(cookie)
		w := httptest.NewRecorder()
		t0 := time.Now()
		h.ServeHTTP(w, req)
		return w, time.Since(t0)
	}
	w, _ := call()
	if w.Code == http.StatusNotFound {
		return 0, 0, "", errNotServed
	}
	if w.Code != http.StatusOK {
		return 0, 0, "", fmt.Errorf("status %d: %.300s", w.Code, w.Body.String())
	}
	var page struct{ Runs []json.RawMessage }
	if strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
			return 0, 0, "", fmt.Errorf("decode the runs page: %w", err)
		}
	}
	body := w.Body.String()
	for i := 0; i < 10; i++ {
		call()
	}
	times := make([]time.Duration, n)
	for i := range times {
		w, d := call()
		if w.Code != http.StatusOK {
			return 0, 0, "", fmt.Errorf("status %d on call %d", w.Code, i)
		}
		times[i] = d
	}
	return median(times), len(page.Runs), body, nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func benchDeployment() deployments.Deployment {
	tasks := make([]deployments.TaskManifest, 0, len(taskIDs))
	for _, id := range taskIDs {
		tasks = append(tasks, deployments.TaskManifest{ID: id, Module: "bundles/t.mjs", Export: id, HasRun: true,
			Sandbox: &deployments.SandboxManifest{Name: "s", Image: &deployments.ImageManifest{Name: "i",
				Steps: []deployments.Step{{Kind: "from", Ref: "helmr/bookworm-node22"}}}}})
	}
	return deployments.Deployment{Project: "bench", Env: "dev",
		Manifest: deployments.Manifest{Project: "bench", Tasks: tasks},
		Files:    map[string][]byte{"bundles/t.mjs": []byte("export {}")}}
}
