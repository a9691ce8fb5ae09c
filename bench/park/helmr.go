package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/testenv"
)

// helmrTimes is what measureHelmr measured of each run.
type helmrTimes struct {
	resume []time.Duration // approve -> the task's next log line
	park   []time.Duration // checkpoint + seal + upload (the parked event's checkpointMs + uploadMs)
	upload []time.Duration // seal + upload alone
	size   int64           // the sealed checkpoint's bytes (the last run's)
}

// measureHelmr starts helmr dev on the gVisor tier with one slot, parking
// waits after a second, with extra settings (the blob store), deploys
// bench/park/project and returns n runs' times (after one warm-up run,
// which also checks that the parked run holds no sandbox process and no
// slot).
func measureHelmr(bin string, n int, extra ...string) (helmrTimes, error) {
	var out helmrTimes
	root := testenv.RepoRoot()
	tmp, err := os.MkdirTemp("", "helmr-bench-")
	if err != nil {
		return out, err
	}
	defer os.RemoveAll(tmp)
	env := append(os.Environ(), "HELMR_DATA_DIR="+filepath.Join(tmp, "data"), "HELMR_PROFILE="+filepath.Join(tmp, "profile.json"),
		"HELMR_ADDR=127.0.0.1:0", "HELMR_PROJECT=", "HELMR_RUNTIME=gvisor", "HELMR_PARK_AFTER=1s", "HELMR_SLOTS=1", "HELMR_WARM=0")
	env = append(env, extra...)
	dev, err := testenv.StartDev(bin, env)
	if err != nil {
		return out, err
	}
	defer dev.Stop()
	env = append(env, "HELMR_URL="+dev.URL)
	if err := helmr(bin, env, root, "deploy", "bench/park/project"); err != nil {
		return out, err
	}
	c := client.New(dev.URL, dev.Token)
	for i := 0; i <= n; i++ {
		p, err := parkedRun(c)
		if err != nil {
			return out, err
		}
		if i == 0 {
			if err := checkParked(c, p); err != nil {
				return out, err
			}
		}
		d, err := resume(c, p)
		if err != nil {
			return out, err
		}
		if i > 0 {
			out.resume = append(out.resume, d)
			out.park = append(out.park, p.checkpoint+p.upload)
			out.upload = append(out.upload, p.upload)
			out.size = p.size
		}
	}
	return out, nil
}

// parked is a run parked in its wait.
type parked struct {
	id, sandbox, message string
	cursor               int64 // the last event's seq
	// checkpoint and upload are the worker's figures in the parked event.
	checkpoint, upload time.Duration
	size               int64 // the sealed checkpoint's bytes
}

// parkedRun triggers the wait task and polls its events until it is parked.
func parkedRun(c *client.Client) (parked, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, _, err := c.TriggerRun(ctx, "parkbench", "dev", "wait", []byte("null"), "")
	if err != nil {
		return parked{}, err
	}
	p := parked{id: r.ID}
	for {
		page, err := c.Events(ctx, r.ID, p.cursor)
		if err != nil {
			return parked{}, fmt.Errorf("events of %s: %w", r.ID, err)
		}
		for _, ev := range page.Events {
			p.cursor = ev.Seq
			var sd runs.SystemData
			if ev.Type != runs.EventSystem || json.Unmarshal(ev.Data, &sd) != nil {
				continue
			}
			if s := sd.Attrs["sandbox"]; s != "" {
				p.sandbox = s
			}
			if strings.HasPrefix(sd.Message, "parked:") {
				p.message = sd.Message
				ck, _ := strconv.Atoi(sd.Attrs["checkpointMs"])
				up, _ := strconv.Atoi(sd.Attrs["uploadMs"])
				p.checkpoint, p.upload = time.Duration(ck)*time.Millisecond, time.Duration(up)*time.Millisecond
				p.size, _ = strconv.ParseInt(sd.Attrs["size"], 10, 64)
			}
		}
		if p.message != "" {
			return p, nil
		}
		if page.Done {
			return parked{}, fmt.Errorf("run %s ended before it was parked", r.ID)
		}
		select {
		case <-ctx.Done():
			return parked{}, fmt.Errorf("run %s not parked: %w", r.ID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// resume approves the parked run and returns the time from the approval
// to its "after" log line arriving over SSE, then waits for it to finish.
func resume(c *client.Client, p parked) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errAfter := errors.New("after")
	got := make(chan time.Time, 1)
	followed := make(chan error, 1)
	go func() {
		followed <- c.Follow(ctx, p.id, p.cursor, func(ev runs.Event) error {
			var ld runs.LogData
			if ev.Type == runs.EventLog && json.Unmarshal(ev.Data, &ld) == nil && strings.TrimSpace(ld.Line) == "after" {
				got <- time.Now()
				return errAfter
			}
			return nil
		})
	}()
	t0 := time.Now()
	if _, err := c.Approve(ctx, p.id, nil); err != nil {
		return 0, fmt.Errorf("approve %s: %w", p.id, err)
	}
	var d time.Duration
	select {
	case t1 := <-got:
		d = t1.Sub(t0)
	case err := <-followed:
		return 0, fmt.Errorf("run %s: no \"after\" line after the approval: %v", p.id, err)
	}
	final, err := waitDone(ctx, c, p.id)
	if err != nil {
		return 0, err
	}
	if final.Status != runs.StatusCompleted {
		return 0, fmt.Errorf("run %s ended %s: %+v", p.id, final.Status, final.Error)
	}
	return d, nil
}

func waitDone(ctx context.Context, c *client.Client, id string) (runs.Run, error) {
	for {
		r, err := c.GetRun(ctx, id)
		if err != nil {
			return runs.Run{}, err
		}
		if r.Status.Terminal() {
			return r, nil
		}
		select {
		case <-ctx.Done():
			return runs.Run{}, fmt.Errorf("run %s still %s: %w", id, r.Status, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkParked checks what a parked run holds: no host process names its
// sandbox (runsc's sandbox, gofer and their children all carry its id on
// their command lines) and, helmr dev having one slot (HELMR_SLOTS=1),
// another run completes while it stays parked.
func checkParked(c *client.Client, p parked) error {
	if p.sandbox == "" {
		return fmt.Errorf("run %s: no sandbox id in its events", p.id)
	}
	fmt.Printf("parked run %s: %s\n", p.id, p.message)
	if procs := hostProcsWith(p.sandbox); len(procs) > 0 {
		return fmt.Errorf("parked run %s: host processes still name its sandbox %s: pids %v", p.id, p.sandbox, procs)
	}
	fmt.Printf("  checked: no host process has %q on its command line (scanned /proc/*/cmdline; runsc processes on the host in all, other work included: %d)\n",
		p.sandbox, len(hostProcsWith("runsc")))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q, _, err := c.TriggerRun(ctx, "parkbench", "dev", "quick", []byte("null"), "")
	if err != nil {
		return err
	}
	final, err := waitDone(ctx, c, q.ID)
	if err != nil || final.Status != runs.StatusCompleted {
		return fmt.Errorf("a run while %s is parked on the only slot: %s %+v (%v)", p.id, final.Status, final.Error, err)
	}
	still, err := c.GetRun(ctx, p.id)
	if err != nil || still.Status != runs.StatusWaiting {
		return fmt.Errorf("parked run %s is %s (%v), want WAITING", p.id, still.Status, err)
	}
	fmt.Printf("  checked: with HELMR_SLOTS=1, run %s completed while %s stayed parked (WAITING): its slot is free\n", q.ID, p.id)
	return nil
}

// hostProcsWith lists host pids whose command line contains s (this
// process excepted).
func hostProcsWith(s string) []string {
	var pids []string
	self := fmt.Sprint(os.Getpid())
	matches, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, m := range matches {
		pid := filepath.Base(filepath.Dir(m))
		b, err := os.ReadFile(m)
		if err == nil && pid != self && bytes.Contains(b, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}
