// Command park measures the resume of a parked wait (issue 6): the median
// time from approving a run parked in ctx.wait.human (POST
// /v1/runs/{id}/approve) to the task's next log line arriving over SSE
// (helmr dev, gVisor tier, HELMR_PARK_AFTER=1s), against the median time
// of a bare `runsc checkpoint` + `runsc restore` of the same kind of
// sandbox (the base root filesystem, a node process that prints a line
// once answered after the restore), measured in the same run with the
// gvisor tier's Checkpointer. It also checks, once, that a parked run
// holds no sandbox process and no worker slot. With HELMR_TEST_S3_* set
// (eval "$(scripts/s3-test.sh)"), it measures helmr again with its blobs
// in that S3 server and prints park (checkpoint, seal, upload) and resume
// against the data directory's (issue 20's target: within 1.3x). Run as
// root after scripts/setup.sh: go run ./bench/park
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/blobs"
	"github.com/helmr/helmr/internal/blobs/s3"
	"github.com/helmr/helmr/internal/testenv"
)

// target is issue 6's: resume after a parked wait within 1.5x a bare
// checkpoint + restore of the same sandbox.
const target = 1.5

func main() {
	n := flag.Int("n", 5, "runs per measurement")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "park:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	rootfs := filepath.Join(testenv.CacheDir(), "bases", "bookworm-node22", "rootfs")
	if _, err := os.Stat(filepath.Join(rootfs, "usr/local/bin/node")); err != nil {
		return fmt.Errorf("base rootfs missing (run scripts/setup.sh): %w", err)
	}
	runsc := filepath.Join(testenv.CacheDir(), "bin", "runsc")
	if _, err := os.Stat(runsc); err != nil {
		return fmt.Errorf("runsc missing (scripts/install-runsc.sh): %w", err)
	}
	bin, err := testenv.BuildBinaries()
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)

	b, err := newBare(runsc, filepath.Join(bin, "helmr-agent"), rootfs)
	if err != nil {
		return err
	}
	bares, err := sample(n+1, b.sample)
	b.close()
	if err != nil {
		return fmt.Errorf("bare checkpoint + restore: %w", err)
	}
	base := median(bares[1:])
	fmt.Printf("resume after a parked wait, gvisor tier, n=%d (one warm-up each, not counted)\n", n)
	fmt.Printf("  bare:  runsc checkpoint + runsc restore of ROOTFS (512 MiB, open network), node answered -> its next line\n")
	fmt.Printf("         median %7.1f ms  (all: %s)\n", ms(base), list(bares[1:]))
	restore := median(b.restores[1:])
	fmt.Printf("         of which runsc restore -> the line: median %7.1f ms (all: %s)\n", ms(restore), list(b.restores[1:]))

	times, err := measureHelmr(bin, n)
	if err != nil {
		return err
	}
	h := times.resume
	fmt.Printf("  helmr: POST /v1/runs/{id}/approve of a parked run -> the task's next log line over SSE\n")
	fmt.Printf("         median %7.1f ms  (all: %s)\n", ms(median(h)), list(h))
	ratio := float64(median(h)) / float64(base)
	verdict := "PASS"
	if ratio > target {
		verdict = "MISS"
	}
	fmt.Printf("  ratio helmr/bare %.2fx (target <= %.2fx): %s\n", ratio, target, verdict)
	// Helmr checkpointed when it parked the run, before the approval: its
	// figure holds only the way back. The restore part alone, for scale.
	fmt.Printf("  (helmr / bare restore part alone %.2fx: Helmr's checkpoint happened when it parked, before t0)\n", float64(median(h))/float64(restore))
	return compareS3(bin, n, times)
}

// s3Target is issue 20's: parking and restore with the blobs in S3 within
// 1.3x of the data directory's, measured in the same run.
const s3Target = 1.3

// compareS3 measures helmr again with its blobs in the S3 server of
// scripts/s3-test.sh (HELMR_TEST_S3_*), if one is set, and prints both.
func compareS3(bin string, n int, dir helmrTimes) error {
	url := os.Getenv("HELMR_TEST_S3_URL")
	if url == "" {
		fmt.Println("  (blobs in S3: not measured; eval \"$(scripts/s3-test.sh)\" first)")
		return nil
	}
	prefix := fmt.Sprintf("bench-park-%d", time.Now().UnixNano())
	s3, err := measureHelmr(bin, n, "HELMR_BLOB_URL="+strings.TrimSuffix(url, "/")+"/"+prefix,
		"HELMR_S3_ENDPOINT="+os.Getenv("HELMR_TEST_S3_ENDPOINT"), "HELMR_S3_ACCESS_KEY="+os.Getenv("HELMR_TEST_S3_ACCESS_KEY"),
		"HELMR_S3_SECRET_KEY="+os.Getenv("HELMR_TEST_S3_SECRET_KEY"))
	if err != nil {
		return fmt.Errorf("blobs in S3: %w", err)
	}
	fmt.Printf("blobs in S3 (%s at %s) vs the data directory, same run, n=%d; sealed checkpoint %.1f MiB (data dir), %.1f MiB (S3)\n",
		url, os.Getenv("HELMR_TEST_S3_ENDPOINT"), n, mib(dir.size), mib(s3.size))
	worst := 0.0
	for _, m := range []struct {
		what     string
		dir, s3  []time.Duration
		targeted bool
	}{
		{"park (checkpoint + seal + upload)", dir.park, s3.park, true},
		{"  of which seal + upload", dir.upload, s3.upload, false},
		{"resume (approve -> next line)", dir.resume, s3.resume, true},
	} {
		d, s := median(m.dir), median(m.s3)
		ratio := float64(s) / float64(max(d, time.Millisecond))
		if m.targeted {
			worst = max(worst, ratio)
		}
		fmt.Printf("  %-36s data dir median %7.1f ms  S3 median %7.1f ms  (S3 all: %s)  %.2fx\n", m.what, ms(d), ms(s), list(m.s3), ratio)
	}
	verdict := "PASS"
	if worst > s3Target {
		verdict = "MISS"
	}
	fmt.Printf("  worst ratio S3/data dir %.2fx (target <= %.2fx): %s\n", worst, s3Target, verdict)
	return storesAlone(n, url, prefix, s3.size)
}

// storesAlone times the two blob stores alone, for scale: a Put of a
// blob of random bytes the size of the parked checkpoints (size) and of
// 16 MiB (an uncompressed checkpoint's) into blobs.Dir and into the S3
// server, through the same code the control plane runs.
func storesAlone(n int, url, prefix string, size int64) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "helmr-bench-blobs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir, err := blobs.NewDir(tmp)
	if err != nil {
		return err
	}
	s3s, err := s3.New(ctx, s3.Config{URL: strings.TrimSuffix(url, "/") + "/" + prefix, Endpoint: os.Getenv("HELMR_TEST_S3_ENDPOINT"),
		AccessKey: os.Getenv("HELMR_TEST_S3_ACCESS_KEY"), SecretKey: os.Getenv("HELMR_TEST_S3_SECRET_KEY"), PathStyle: true})
	if err != nil {
		return err
	}
	defer func() { _ = s3s.Delete(ctx, "ck_bench") }()
	for _, sz := range []int64{max(size, 1), 16 << 20} {
		data := make([]byte, sz)
		_, _ = rand.Read(data)
		put := func(st blobs.Store) func() (time.Duration, error) {
			return func() (time.Duration, error) {
				t0 := time.Now()
				_, err := st.Put(ctx, "ck_bench", struct{ io.Reader }{bytes.NewReader(data)})
				return time.Since(t0), err
			}
		}
		d, err := sample(n, put(dir))
		if err != nil {
			return err
		}
		o, err := sample(n, put(s3s))
		if err != nil {
			return err
		}
		fmt.Printf("  the stores alone, Put of %.1f MiB: data dir median %.1f ms, S3 median %.1f ms (%.2fx): the floor of the upload part\n",
			mib(sz), ms(median(d)), ms(median(o)), float64(median(o))/float64(max(median(d), time.Microsecond)))
	}
	return nil
}

func helmr(bin string, env []string, dir string, args ...string) error {
	cmd := exec.Command(filepath.Join(bin, "helmr"), args...)
	cmd.Env, cmd.Dir = env, dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("helmr %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func sample(n int, f func() (time.Duration, error)) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		d, err := f()
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func list(d []time.Duration) string {
	s := make([]string, len(d))
	for i, v := range d {
		s[i] = fmt.Sprintf("%.0f", ms(v))
	}
	return strings.Join(s, " ") + " ms"
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
