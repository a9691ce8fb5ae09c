package httpapi_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/helmr/helmr/internal/client"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/testenv"
	"github.com/helmr/helmr/internal/workspaces"
)

// runDataOps is a remote worker (the HTTP client a `helmr worker` uses)
// running operations with the host's shell in dir: a data operation's
// bytes stream over GET and PUT /v1/worker/ops/{id}/data. A command
// naming "breakme" has its output cut off after 1 MiB, as a worker that
// dies mid-transfer leaves it.
func (e *apiEnv) runDataOps(ctx context.Context, dir string) {
	w := client.Worker{C: client.New(e.srv.URL, "wtok")}
	for ctx.Err() == nil {
		op, err := w.NextOp(ctx, "wdata", "h-ops")
		if err != nil || op.Exec == nil {
			continue
		}
		res := runData(ctx, w, op, dir)
		_ = w.FinishOp(context.WithoutCancel(ctx), op.ID, res)
	}
}

func runData(ctx context.Context, w client.Worker, op workspaces.Op, dir string) workspaces.OpResult {
	if op.Data == "" {
		res := runLocal(ctx, dir, *op.Exec)
		return workspaces.OpResult{Exec: &res, Host: "h-ops"}
	}
	cmd := exec.CommandContext(ctx, op.Exec.Argv[0], op.Exec.Argv[1:]...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	var delivered chan error
	var pw *io.PipeWriter
	if op.Data == workspaces.DataIn {
		in, err := w.OpInput(ctx, op.ID)
		if err != nil {
			return workspaces.OpResult{Error: err.Error()}
		}
		defer in.Close()
		cmd.Stdin = in
	} else {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		cmd.Stdout = pw
		delivered = make(chan error, 1)
		if strings.Contains(strings.Join(op.Exec.Argv, " "), "breakme") {
			// 1 MiB goes out, then the worker dies.
			f, err := os.Open(filepath.Join(dir, "breakme"))
			if err == nil {
				err = w.OpDeliver(ctx, op.ID, io.LimitReader(f, 1<<20))
				f.Close()
			}
			return workspaces.OpResult{Error: fmt.Sprintf("the worker died (after %v)", err)}
		}
		go func() {
			err := w.OpDeliver(ctx, op.ID, pr)
			pr.CloseWithError(errors.New("not taken"))
			delivered <- err
		}()
	}
	err := cmd.Run()
	res := workspaces.ExecResult{Stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode = ee.ExitCode()
	} else if err != nil && pw == nil {
		return workspaces.OpResult{Error: err.Error()}
	}
	if pw != nil {
		pw.Close()
		if err := <-delivered; err != nil {
			return workspaces.OpResult{Error: "send the output: " + err.Error()}
		}
	}
	return workspaces.OpResult{Exec: &res, Host: "h-ops"}
}

// TestFilesStreamThroughRemoteWorker: files and tars move between the
// API and a remote worker as streams, both ways, larger than any chunk
// on the way; refusals keep their status; a transfer that breaks off
// after bytes went out breaks the response off too, never a short 200.
func TestFilesStreamThroughRemoteWorker(t *testing.T) {
	for _, tool := range []string{"sh", "realpath", "stat", "tar"} {
		_, err := exec.LookPath(tool)
		testenv.Require(t, err == nil, "the test's worker runs the transfer scripts with the host's "+tool)
	}
	e := newAPI(t)
	ws := e.freeWorkspace(t)
	dir := t.TempDir()
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.runDataOps(ctx, dir) }()
	defer func() { stop(); wg.Wait() }()
	c := client.New(e.srv.URL, e.owner)

	data := make([]byte, 6<<20+11)
	for i := range data {
		data[i] = byte(i*31 + i/7919)
	}
	if err := c.WriteFileFrom(ctx, ws, "d/big.bin", bytes.NewReader(data)); err != nil {
		t.Fatalf("write 6 MiB = %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "d/big.bin")); !bytes.Equal(got, data) {
		t.Fatalf("the worker wrote %d bytes, not what was sent", len(got))
	}
	var back bytes.Buffer
	if n, err := c.ReadFileTo(ctx, ws, "d/big.bin", &back); err != nil || n != int64(len(data)) || !bytes.Equal(back.Bytes(), data) {
		t.Fatalf("read 6 MiB = %d, %v; want what was written", n, err)
	}

	var tb bytes.Buffer
	if _, err := c.DownloadTarTo(ctx, ws, "d", &tb); err != nil {
		t.Fatalf("download tar = %v", err)
	}
	if err := c.UploadTarFrom(ctx, ws, "e/f", &tb); err != nil {
		t.Fatalf("upload tar = %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "e/f/big.bin")); !bytes.Equal(got, data) {
		t.Errorf("the tar round trip gave %d bytes", len(got))
	}

	os.Symlink("/etc", filepath.Join(dir, "out"))
	for _, c2 := range []struct {
		path string
		kind error
	}{{"../x", errdefs.ErrInvalid}, {"out/passwd", errdefs.ErrInvalid}, {"missing", errdefs.ErrNotFound}, {"d", errdefs.ErrInvalid}} {
		if _, err := c.ReadFileTo(ctx, ws, c2.path, io.Discard); !errors.Is(err, c2.kind) {
			t.Errorf("read %s = %v, want %v", c2.path, err, c2.kind)
		}
	}
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "../up", Typeflag: tar.TypeReg})
	tw.Close()
	if err := c.UploadTarFrom(ctx, ws, "x", &evil); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("upload a tar leading out = %v, want 400", err)
	}

	// Broken off after 1 MiB: the client reads an error, not a short file.
	if err := os.WriteFile(filepath.Join(dir, "breakme"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/workspaces/"+ws+"/files?path=breakme", nil)
	req.Header.Set("Authorization", "Bearer "+e.owner)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || resp.StatusCode != http.StatusOK || len(got) < 1<<20 {
		t.Errorf("a read broken off after 1 MiB answered %d with %d bytes, %v; want the 200's body broken off", resp.StatusCode, len(got), err)
	}
}
