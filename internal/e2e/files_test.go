package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/workspaces"
)

// TestFilesStream moves a 20 MiB file both ways through the files API of
// a real helmr dev on gVisor (as streams, through the agent, into and out
// of the workspace's sandbox) and checks every byte; `helmr workspace cp`
// copies a directory up and down again; exec returns raw bytes as
// base64; the trajectory records sizes, not contents.
func TestFilesStream(t *testing.T) {
	d := startDev(t, "gvisor")
	d.deploy("internal/e2e/testdata/workspace")
	var ws workspaces.Workspace
	if err := json.Unmarshal([]byte(d.mustHelmr("workspace", "create", "notes", "--project", "workspace", "--json")), &ws); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	data := make([]byte, 20<<20+13)
	for i := range data {
		data[i] = byte(i*131 + i/65521)
	}
	if err := d.api.WriteFileFrom(ctx, ws.ID, "big/file.bin", bytes.NewReader(data)); err != nil {
		t.Fatalf("write 20 MiB = %v", err)
	}
	want := sha256.Sum256(data)
	if out := d.mustHelmr("exec", ws.ID, "--", "sha256sum", "big/file.bin"); !strings.HasPrefix(out, hex.EncodeToString(want[:])) {
		t.Errorf("sha256sum in the sandbox = %q, want %x", out, want)
	}
	var back bytes.Buffer
	if n, err := d.api.ReadFileTo(ctx, ws.ID, "big/file.bin", &back); err != nil || n != int64(len(data)) || !bytes.Equal(back.Bytes(), data) {
		t.Fatalf("read 20 MiB = %d bytes, %v; want what was written", n, err)
	}
	// Paths still stay in the workspace, symlinks included.
	d.mustHelmr("exec", ws.ID, "--", "ln", "-s", "/etc", "out")
	if _, err := d.api.ReadFile(ctx, ws.ID, "out/passwd"); err == nil || !strings.Contains(err.Error(), "leaves the workspace") {
		t.Errorf("read through a symlink out = %v, want refused", err)
	}
	recs := trajectory(t, d, ws.ID)
	for _, r := range recs {
		if len(r.Request)+len(r.Result) > 8<<10 {
			t.Errorf("trajectory record %s holds %d bytes: contents, not sizes", r.Kind, len(r.Request)+len(r.Result))
		}
	}

	// A directory up and down with helmr workspace cp (no -r).
	local := t.TempDir()
	src := filepath.Join(local, "proj")
	for name, body := range map[string]string{"a.txt": "A\n", "sub/b.bin": "\x00\xff\x01", "sub/deeper/c": strings.Repeat("c", 300<<10)} {
		p := filepath.Join(src, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("a.txt", filepath.Join(src, "link"))
	d.mustHelmr("exec", ws.ID, "--", "mkdir", "-p", "dest")
	d.mustHelmr("workspace", "cp", src, ws.ID+":dest")
	if out := d.mustHelmr("exec", ws.ID, "--shell", "--", "cat dest/proj/a.txt dest/proj/link; wc -c < dest/proj/sub/deeper/c"); out != "A\nA\n307200\n" {
		t.Errorf("the directory uploaded into dest/ = %q", out)
	}
	down := filepath.Join(local, "down")
	d.mustHelmr("workspace", "cp", ws.ID+":dest/proj", down)
	for name, body := range map[string]string{"a.txt": "A\n", "sub/b.bin": "\x00\xff\x01", "link": "A\n"} {
		if got, err := os.ReadFile(filepath.Join(down, name)); err != nil || string(got) != body {
			t.Errorf("downloaded %s = %q, %v; want %q", name, got, err, body)
		}
	}
	if _, errOut, code := d.helmr("workspace", "cp", ws.ID+":nope", filepath.Join(local, "x")); code == 0 || !strings.Contains(errOut, "no such file") {
		t.Errorf("cp of a missing path = exit %d %q, want a clear error", code, errOut)
	}

	// Exec's output as base64: the bytes as printed.
	res, err := d.api.Exec(ctx, ws.ID, workspaces.ExecRequest{Command: `printf 'a\377\000b'`, OutputEncoding: workspaces.EncodingBase64})
	if raw, _ := base64.StdEncoding.DecodeString(res.Stdout); err != nil || string(raw) != "a\xff\x00b" || res.OutputEncoding != "base64" {
		t.Errorf("exec with base64 output = %+v, %v; want a\\xff\\x00b", res, err)
	}
}
