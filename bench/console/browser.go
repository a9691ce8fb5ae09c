package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// pageTiming is what console/e2e/bench/runpage.mjs reports for one
// navigation.
type pageTiming struct {
	Status int `json:"status"`
	// LastLineMs is the time from navigation start until the last line
	// was in the DOM; PaintedMs until the frame after it was painted.
	LastLineMs float64 `json:"lastLineMs"`
	PaintedMs  float64 `json:"paintedMs"`
	Visible    bool    `json:"visible"`
	Error      string  `json:"error"`
}

// runPage opens the run page in headless Chromium o.browserSamples times
// and prints the median time until its timeline shows last.
func runPage(ctx context.Context, o options, base, path string, cookie *http.Cookie, last string) error {
	script := filepath.Join("console", "e2e", "bench", "runpage.mjs")
	if _, err := os.Stat(filepath.Join("console", "e2e", "node_modules", "playwright-core")); err != nil {
		fmt.Printf("  run page in Chromium: not measured: console/e2e's dependencies are missing (run scripts/setup.sh from the repository root)\n")
		return nil
	}
	req, _ := json.Marshal(map[string]any{"url": base + path, "origin": base, "cookie": map[string]string{"name": cookie.Name, "value": cookie.Value},
		"lastLine": last, "samples": o.browserSamples, "chromium": o.chromium})
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Stdin = bytes.NewReader(req)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s: %w", script, err)
	}
	var ts []pageTiming
	if err := json.Unmarshal(out, &ts); err != nil {
		return fmt.Errorf("%s printed %q: %w", script, out, err)
	}
	if len(ts) == 0 {
		return fmt.Errorf("%s measured nothing", script)
	}
	if ts[0].Status == http.StatusNotFound {
		fmt.Printf("  run page in Chromium: not served yet (GET %s answers 404)\n", path)
		return nil
	}
	var line, painted []time.Duration
	for i, t := range ts {
		if t.Error != "" {
			fmt.Printf("  run page in Chromium: navigation %d: %s\n", i+1, t.Error)
			return nil
		}
		line = append(line, time.Duration(t.LastLineMs*float64(time.Millisecond)))
		painted = append(painted, time.Duration(t.PaintedMs*float64(time.Millisecond)))
	}
	verdict := "meets"
	if median(painted) >= time.Second {
		verdict = "MISSES"
	}
	fmt.Printf("  run page %s in headless Chromium (%d log lines): last line in the DOM after %v, painted after %v (medians of %d navigations; visible in the viewport: %v); %s the target < 1 s\n",
		path, o.lines, ms(median(line)), ms(median(painted)), len(ts), ts[len(ts)-1].Visible, verdict)
	return nil
}
