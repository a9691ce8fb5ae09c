package workspaces

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/testenv"
)

// hostWorker serves the operations of o as a worker of host h1 would,
// with the host's shell in dir standing for the workspace's sandbox:
// data operations stream their stdin from o.Input or their stdout to
// o.Deliver, as a worker does through its control plane.
func hostWorker(t *testing.T, o *Ops, dir string) {
	t.Helper()
	for _, tool := range []string{"sh", "realpath", "stat", "tar", "cat"} {
		_, err := exec.LookPath(tool)
		testenv.Require(t, err == nil, "the data operations' scripts run with the host's "+tool)
	}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			op, err := o.Next(ctx, "h1")
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = o.Finish(ctx, op.ID, runOnHost(ctx, o, op, dir))
			}()
		}
	}()
	t.Cleanup(func() { stop(); wg.Wait() })
}

func runOnHost(ctx context.Context, o *Ops, op Op, dir string) OpResult {
	cmd := exec.CommandContext(ctx, op.Exec.Argv[0], op.Exec.Argv[1:]...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Stdin = strings.NewReader(op.Exec.Stdin)
	var delivered chan error
	switch op.Data {
	case DataIn:
		in, err := o.Input(ctx, op.ID)
		if err != nil {
			return OpResult{Error: err.Error()}
		}
		defer in.Close()
		cmd.Stdin = in
	case DataOut:
		pr, pw := io.Pipe()
		cmd.Stdout = pw
		delivered = make(chan error, 1)
		go func() {
			_, err := o.Deliver(ctx, op.ID, pr)
			pr.CloseWithError(errors.New("not taken"))
			delivered <- err
		}()
		defer func() { pw.Close() }()
	}
	err := cmd.Run()
	res := ExecResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode = ee.ExitCode()
	} else if err != nil {
		return OpResult{Error: err.Error()}
	}
	if delivered != nil {
		cmd.Stdout.(*io.PipeWriter).Close()
		if err := <-delivered; err != nil {
			return OpResult{Error: "deliver: " + err.Error()}
		}
	}
	return OpResult{Exec: &res, Host: "h1"}
}

// hostService is a service over one workspace whose operations run on
// the host in a temporary directory (the workspace), which it returns.
func hostService(t *testing.T) (*Service, Workspace, string, *fakeTrajectory) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	st := &fakeStore{ws: Workspace{ID: "ws_1", Project: "p", Env: "dev", TaskID: "a", Sandbox: "s", Host: "h1"}}
	tr := &fakeTrajectory{}
	svc := NewService(st, fakeTasks{sandboxTask("a", "s")}, fakeRuns{}, nil, nil)
	svc.Trajectories = tr
	hostWorker(t, svc.Ops(), ws)
	return svc, st.ws, ws, tr
}

// pattern is n bytes that are not all alike, with every byte value.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/4099)
	}
	return b
}

// TestTransferFiles writes and reads files as streams, larger than any
// one chunk, binary intact; the trajectory records paths and sizes, never
// bytes.
func TestTransferFiles(t *testing.T) {
	svc, ws, dir, tr := hostService(t)
	ctx := t.Context()
	data := pattern(3<<20 + 5) // several of every chunk along the way
	n, err := svc.WriteFile(ctx, ws, Transfer{Path: "deep/dir/f.bin"}, bytes.NewReader(data))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("WriteFile = %d, %v; want %d bytes written", n, err, len(data))
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "deep/dir/f.bin")); !bytes.Equal(got, data) {
		t.Fatalf("the file written holds %d bytes, not what was sent", len(got))
	}
	var buf bytes.Buffer
	if n, err := svc.ReadFile(ctx, ws, Transfer{Path: "deep/dir/f.bin"}, &buf); err != nil || n != int64(len(data)) || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("ReadFile = %d bytes, %v; want what was written", n, err)
	}
	// An empty file both ways.
	if _, err := svc.WriteFile(ctx, ws, Transfer{Path: "empty"}, strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if n, err := svc.ReadFile(ctx, ws, Transfer{Path: "empty"}, &buf); err != nil || n != 0 {
		t.Errorf("ReadFile(empty) = %d, %v", n, err)
	}
	// A bounded read of a larger file is too large.
	if _, err := svc.ReadFileBytes(ctx, ws, Transfer{Path: "deep/dir/f.bin"}, 1<<20); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Errorf("ReadFileBytes(3 MiB, at most 1 MiB) = %v, want too large", err)
	}
	// Anywhere: an absolute path, outside the workspace.
	abs := filepath.Join(filepath.Dir(dir), "outside", "x.txt")
	if _, err := svc.WriteFile(ctx, ws, Transfer{Path: abs, Anywhere: true, Kind: "swerex.write_file"}, strings.NewReader("out")); err != nil {
		t.Fatalf("WriteFile(anywhere %s) = %v", abs, err)
	}
	if got, err := svc.ReadFileBytes(ctx, ws, Transfer{Path: abs, Anywhere: true}, 10); err != nil || string(got) != "out" {
		t.Errorf("ReadFileBytes(anywhere) = %q, %v", got, err)
	}
	recs := tr.ops
	if len(recs) == 0 || recs[0].Kind != "file.write" || !strings.Contains(string(recs[0].Request), `"bytes":3145733`) || !strings.Contains(string(recs[0].Request), `"path":"deep/dir/f.bin"`) {
		t.Errorf("first record = %+v, want file.write with path and size", recs[0])
	}
	for _, r := range recs {
		if len(r.Request)+len(r.Result) > 4096 {
			t.Errorf("record %s holds %d bytes: contents, not sizes", r.Kind, len(r.Request)+len(r.Result))
		}
	}
	if k := recs[len(recs)-2].Kind; k != "swerex.write_file" {
		t.Errorf("record of a transfer with Kind = %q, want swerex.write_file", k)
	}
}

// TestTransferRefuses: paths that leave the workspace (symlinks
// included), missing files, directories where files are wanted, streams
// past the limit or cut off: each a clear error of its kind, nothing
// written outside.
func TestTransferRefuses(t *testing.T) {
	svc, ws, dir, _ := hostService(t)
	ctx := t.Context()
	outside := filepath.Join(filepath.Dir(dir), "secret")
	if err := os.WriteFile(outside, []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(dir), filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path  string
		kind  error
		msg   string
		write bool // the write is refused too
	}{
		{"../secret", errdefs.ErrInvalid, "leaves the workspace", true},
		{"/etc/passwd", errdefs.ErrInvalid, "is absolute", true},
		{"out/secret", errdefs.ErrInvalid, "leaves the workspace (through a symlink)", true},
		{"", errdefs.ErrInvalid, "path query parameter is required", true},
		{"a\x00b", errdefs.ErrInvalid, "NUL", true},
		{"missing", errdefs.ErrNotFound, "no such file", false},
		{"d", errdefs.ErrInvalid, "is a directory", true},
	} {
		var buf bytes.Buffer
		_, err := svc.ReadFile(ctx, ws, Transfer{Path: c.path}, &buf)
		if !errors.Is(err, c.kind) || !strings.Contains(fmt.Sprint(err), c.msg) || buf.Len() != 0 {
			t.Errorf("ReadFile(%q) = %v (%d bytes); want %v saying %q", c.path, err, buf.Len(), c.kind, c.msg)
		}
		_, err = svc.WriteFile(ctx, ws, Transfer{Path: c.path}, strings.NewReader("x"))
		if c.write && (!errors.Is(err, c.kind) || !strings.Contains(fmt.Sprint(err), c.msg)) {
			t.Errorf("WriteFile(%q) = %v; want %v saying %q", c.path, err, c.kind, c.msg)
		}
	}
	if got, _ := os.ReadFile(outside); string(got) != "s" {
		t.Errorf("a refused write reached outside the workspace: %q", got)
	}
	if _, err := svc.ReadFile(ctx, ws, Transfer{Path: "d"}, io.Discard); !errors.Is(err, ErrIsDirectory) {
		t.Errorf("ReadFile(a directory) = %v, want ErrIsDirectory", err)
	}
	// A stream that breaks off is an error, not a shorter file taken
	// for the whole.
	broken := io.MultiReader(bytes.NewReader(pattern(300<<10)), &failReader{errors.New("client went away")})
	if _, err := svc.WriteFile(ctx, ws, Transfer{Path: "cut.bin"}, broken); err == nil || !strings.Contains(err.Error(), "client went away") {
		t.Errorf("WriteFile(a stream cut off) = %v, want its error", err)
	}
	// A reader that fails writing the download: the error.
	if _, err := svc.ReadFile(ctx, ws, Transfer{Path: "empty-or-not"}, io.Discard); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("ReadFile(missing) = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), pattern(2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ReadFile(ctx, ws, Transfer{Path: "big"}, &failWriter{after: 1 << 20}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("ReadFile into a writer that fails = %v, want its error", err)
	}
}

type failReader struct{ err error }

func (f *failReader) Read([]byte) (int, error) { return 0, f.err }

type failWriter struct{ after int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.after -= len(p); f.after < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

// TestTransferTars: a directory goes down as a tar and up again into
// another; a tar with a member leading out is refused whole, nothing of
// it unpacked.
func TestTransferTars(t *testing.T) {
	svc, ws, dir, _ := hostService(t)
	ctx := t.Context()
	big := pattern(1<<20 + 3)
	for name, body := range map[string][]byte{"src/a.txt": []byte("A\n"), "src/sub/b.bin": big, "src/.hidden": []byte("h")} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "src/link")); err != nil {
		t.Fatal(err)
	}
	var tb bytes.Buffer
	if _, err := svc.DownloadTar(ctx, ws, Transfer{Path: "src"}, &tb); err != nil {
		t.Fatalf("DownloadTar = %v", err)
	}
	if _, err := svc.UploadTar(ctx, ws, Transfer{Path: "copy/here"}, bytes.NewReader(tb.Bytes())); err != nil {
		t.Fatalf("UploadTar = %v", err)
	}
	for name, want := range map[string][]byte{"a.txt": []byte("A\n"), "sub/b.bin": big, ".hidden": []byte("h"), "link": []byte("A\n")} {
		if got, err := os.ReadFile(filepath.Join(dir, "copy/here", name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("copy/here/%s = %d bytes, %v; want the original", name, len(got), err)
		}
	}
	if l, err := os.Readlink(filepath.Join(dir, "copy/here/link")); err != nil || l != "a.txt" {
		t.Errorf("the symlink came up as %q, %v", l, err)
	}
	if _, err := svc.DownloadTar(ctx, ws, Transfer{Path: "src/a.txt"}, io.Discard); !errors.Is(err, ErrNotDirectory) {
		t.Errorf("DownloadTar(a file) = %v, want ErrNotDirectory", err)
	}
	var evil bytes.Buffer
	tw := tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "ok.txt", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("x"))
	tw.WriteHeader(&tar.Header{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: "/etc"})
	tw.Close()
	if _, err := svc.UploadTar(ctx, ws, Transfer{Path: "evil"}, &evil); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "outside the directory") {
		t.Errorf("UploadTar(symlink out) = %v, want refused", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "evil")); !os.IsNotExist(err) {
		t.Errorf("a refused tar left evil/ behind (%v)", err)
	}
	if _, err := svc.UploadTar(ctx, ws, Transfer{Path: "x"}, strings.NewReader("not a tar at all, no")); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("UploadTar(garbage) = %v, want invalid", err)
	}
}

// TestDataAcrossReplicas: with a shared queue, a worker of another
// replica takes the data operation; the bytes meet in the queue, both
// ways, and nothing of them stays there.
func TestDataAcrossReplicas(t *testing.T) {
	q := newMemQueue()
	front, back := NewOps(), NewOps()
	for _, o := range []*Ops{front, back} {
		o.Shared, o.Poll = q, 5*time.Millisecond
	}
	dir := t.TempDir()
	hostWorker(t, back, dir) // the worker long-polls the other replica
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ws := Workspace{ID: "ws_1", Host: "h1"}
	data := pattern(700 << 10) // several pieces
	res, n, err := front.DoData(ctx, Op{Workspace: ws, Exec: &ExecRequest{Argv: []string{"sh", "-c", "cat > f"}}}, bytes.NewReader(data), nil)
	if err != nil || res.Error != "" || res.Exec.ExitCode != 0 || n != int64(len(data)) {
		t.Fatalf("DoData(upload) = %+v, %d, %v", res, n, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "f")); !bytes.Equal(got, data) {
		t.Fatalf("the other replica's worker wrote %d bytes, not what was sent", len(got))
	}
	var buf bytes.Buffer
	res, n, err = front.DoData(ctx, Op{Workspace: ws, Exec: &ExecRequest{Argv: []string{"cat", "f"}}}, nil, &buf)
	if err != nil || res.Error != "" || n != int64(len(data)) || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("DoData(download) = %+v, %d bytes, %v; want what went up", res, buf.Len(), err)
	}
	// An upload that breaks off reaches the worker as an error.
	cut := io.MultiReader(bytes.NewReader(data[:300<<10]), &failReader{errors.New("client went away")})
	if _, _, err := front.DoData(ctx, Op{Workspace: ws, Exec: &ExecRequest{Argv: []string{"sh", "-c", "cat > g"}}}, cut, nil); err == nil || !strings.Contains(err.Error(), "client went away") {
		t.Errorf("DoData(upload cut off) = %v, want its error", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.ops) != 0 {
		t.Errorf("the queue holds %d entries after the transfers, want none", len(q.ops))
	}
}

// memQueue is an OpQueue in memory, as the database keeps one.
type memQueue struct {
	mu   sync.Mutex
	ops  map[string]*memOp
	seq  int64
	fifo []string
}

type memOp struct {
	host    string
	by      string
	data    []byte
	taken   bool
	result  []byte
	outputs []QueuedOutput
}

func newMemQueue() *memQueue { return &memQueue{ops: map[string]*memOp{}} }

func (q *memQueue) QueueOp(_ context.Context, id, host string, op []byte, _ time.Time) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ops[id] = &memOp{host: host, data: op}
	q.fifo = append(q.fifo, id)
	return nil
}

func (q *memQueue) ClaimQueuedOp(_ context.Context, id, by string, _ time.Time) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	op, ok := q.ops[id]
	if !ok || op.taken {
		return false, nil
	}
	op.taken, op.by = true, by
	return true, nil
}

func (q *memQueue) TakeQueuedOp(_ context.Context, host, by string, _ time.Time) (string, []byte, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, id := range q.fifo {
		if op, ok := q.ops[id]; ok && !op.taken && (op.host == "" || op.host == host) {
			op.taken, op.by = true, by
			return id, op.data, nil
		}
	}
	return "", nil, ErrNoOp
}

func (q *memQueue) FinishQueuedOp(_ context.Context, id string, result []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	op, ok := q.ops[id]
	if !ok {
		return errdefs.NotFoundf("op %s", id)
	}
	op.result = result
	return nil
}

func (q *memQueue) AppendQueuedOutput(_ context.Context, id string, out []byte) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	op, ok := q.ops[id]
	if !ok {
		return errdefs.NotFoundf("op %s", id)
	}
	q.seq++
	op.outputs = append(op.outputs, QueuedOutput{Seq: q.seq, Data: out})
	return nil
}

func (q *memQueue) QueuedResult(_ context.Context, id string) ([]byte, bool, string, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	op, ok := q.ops[id]
	if !ok {
		return nil, false, "", nil
	}
	return op.result, op.result != nil, op.by, nil
}

func (q *memQueue) QueuedOutputs(_ context.Context, id string, after int64) ([]QueuedOutput, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []QueuedOutput
	if op, ok := q.ops[id]; ok {
		for _, o := range op.outputs {
			if o.Seq > after {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

func (q *memQueue) DropQueuedOp(_ context.Context, id string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.ops, id)
	return nil
}

func (q *memQueue) SweepQueuedOps(context.Context, time.Time) error { return nil }
