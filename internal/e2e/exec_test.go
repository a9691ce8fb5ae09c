package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/workspaces"
)

// TestWorkspaceExec runs direct operations in a workspace: a command sees
// what runs left and a run sees what commands wrote (the worker hands the
// workspace back and forth); exit codes come back; a command past its
// timeout is killed; a flood of output is cut at the limit with a marker;
// bad input is refused.
func TestWorkspaceExec(t *testing.T) { forEachTier(t, testWorkspaceExec) }

func testWorkspaceExec(t *testing.T, tier string) {
	d := startDev(t, tier)
	d.deploy("internal/e2e/testdata/workspace")
	r := mustRun(t, d.mustHelmr("run", "notes", "--project", "workspace", "--payload-json", `{"line":"one"}`, "--json"))
	r = d.waitDone(r.ID, 2*time.Minute)
	ws := r.WorkspaceID
	if r.Status != runs.StatusCompleted || ws == "" {
		t.Fatalf("run = %s in %q", r.Status, ws)
	}

	if out := d.mustHelmr("exec", ws, "--", "cat", "notes.txt"); out != "one\n" {
		t.Errorf("exec cat notes.txt = %q, want what the run wrote", out)
	}
	_, _, code := d.helmr("exec", ws, "--shell", "--", "echo two >> notes.txt; exit 3")
	if code != 3 {
		t.Errorf("exec exiting 3 = exit %d", code)
	}
	if out := d.mustHelmr("exec", ws, "-e", "WHO=helmr", "--cwd", "sub/..", "--shell", "--", `echo "$WHO in $(pwd)"`); out != "helmr in /workspace\n" {
		t.Errorf("exec with env and cwd = %q", out)
	}
	// A run takes the workspace from the operations' sandbox, and back.
	r = mustRun(t, d.mustHelmr("run", "notes", "--project", "workspace", "--payload-json", `{"line":"three"}`, "--workspace", ws, "--json"))
	if r = d.waitDone(r.ID, 2*time.Minute); r.Status != runs.StatusCompleted || string(r.Output) != `"one\ntwo\n"` {
		t.Fatalf("run after exec = %s %s %+v, want it to see the exec's write", r.Status, r.Output, r.Error)
	}
	if out := d.mustHelmr("exec", ws, "--", "cat", "notes.txt"); out != "one\ntwo\nthree\n" {
		t.Errorf("exec after the run = %q", out)
	}

	// Timeout.
	start := time.Now()
	_, errOut, code := d.helmr("exec", ws, "--timeout", "1", "--", "sleep", "30")
	if code != 124 || !strings.Contains(errOut, "killed after its timeout") || time.Since(start) > 20*time.Second {
		t.Errorf("exec past its timeout = exit %d %q after %s, want 124 within seconds", code, errOut, time.Since(start))
	}
	// A flood of output is cut at the limit.
	out := d.mustHelmr("exec", ws, "--json", "--shell", "--", `head -c 3000000 /dev/zero | tr '\0' a; echo done >&2`)
	var res workspaces.ExecResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if !res.StdoutTruncated || len(res.Stdout) < workspaces.MaxOutputBytes || len(res.Stdout) > workspaces.MaxOutputBytes+200 ||
		!strings.Contains(res.Stdout, "[helmr: output truncated: 1951424 more bytes]") || res.Stderr != "done\n" {
		t.Errorf("flood: truncated %v, %d bytes of stdout, tail %q, stderr %q", res.StdoutTruncated, len(res.Stdout), res.Stdout[max(0, len(res.Stdout)-80):], res.Stderr)
	}

	// Credentials the caller never sees: the worker puts ${vault:NAME} in
	// for the exec; whatever prints it, the answer holds the marker.
	const token = "tok-Zq8Rw3Lp"
	cmd := exec.Command(filepath.Join(d.bin, "helmr"), "secret", "set", "TOKEN", "--project", "workspace")
	cmd.Env, cmd.Stdin = d.env, strings.NewReader(token)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("secret set: %v: %s", err, out)
	}
	out = d.mustHelmr("exec", ws, "--json", "-e", "API_KEY=${vault:TOKEN}", "--shell", "--",
		`echo "arg ${vault:TOKEN}"; env | grep API_KEY; cat /proc/self/environ | tr '\0' '\n' | grep API_KEY; echo ${vault:TOKEN} >&2; test "$API_KEY" = `+token+` && echo same`)
	if strings.Contains(out, token) || !strings.Contains(out, "arg [redacted:TOKEN]") || !strings.Contains(out, "API_KEY=[redacted:TOKEN]") ||
		!strings.Contains(out, `"stderr": "[redacted:TOKEN]\n"`) || !strings.Contains(out, "same") {
		t.Errorf("exec with ${vault:TOKEN}:\n%s\nwant the value in the command and only the marker in the answer", out)
	}
	// Encoded the way programs print credentials without meaning to (a
	// Basic auth header, a hex dump, a URL): still only the marker.
	out = d.mustHelmr("exec", ws, "--json", "--shell", "--",
		`printf 'user:%s' ${vault:TOKEN} | base64; printf 'xy%s' ${vault:TOKEN} | base64; printf %s ${vault:TOKEN} | od -An -tx1 | tr -d ' \n'; echo`)
	for _, leaked := range []string{base64.StdEncoding.EncodeToString([]byte("user:" + token)), base64.StdEncoding.EncodeToString([]byte("xy" + token)), hex.EncodeToString([]byte(token))} {
		if strings.Contains(out, leaked) || strings.Count(out, "[redacted:TOKEN]") != 3 {
			t.Errorf("exec printing the secret encoded:\n%s\nwant no %q, and three markers", out, leaked)
		}
	}
	if _, errOut, code := d.helmr("exec", ws, "--shell", "--", "echo ${vault:MISSING}"); code == 0 || !strings.Contains(errOut, "no secret MISSING in workspace/dev") {
		t.Errorf("exec with an unknown secret = exit %d %q", code, errOut)
	}

	// Files: write, read, list; paths stay in the workspace, symlinks
	// included; oversize files are refused.
	local := filepath.Join(t.TempDir(), "in.bin")
	payload := append([]byte("binary\x00\xff"), strings.Repeat("z", 1000)...)
	if err := os.WriteFile(local, payload, 0o644); err != nil {
		t.Fatal(err)
	}
	d.mustHelmr("workspace", "cp", local, ws+":deep/dir/in.bin")
	back := filepath.Join(t.TempDir(), "back.bin")
	d.mustHelmr("workspace", "cp", ws+":deep/dir/in.bin", back)
	if got, _ := os.ReadFile(back); string(got) != string(payload) {
		t.Errorf("the file read back differs: %d bytes, want %d", len(got), len(payload))
	}
	ctx := context.Background()
	if data, err := d.api.ReadFile(ctx, ws, "notes.txt"); err != nil || string(data) != "one\ntwo\nthree\n" {
		t.Errorf("ReadFile(notes.txt) = %q, %v", data, err)
	}
	status, body := d.get("/v1/workspaces/" + ws + "/dir?path=deep")
	if status != 200 || !strings.Contains(string(body), `"name":"dir","type":"dir"`) {
		t.Errorf("list deep = %d %s", status, body)
	}
	d.mustHelmr("exec", ws, "--", "ln", "-s", "/etc", "out")
	for _, c := range []struct{ path, want string }{
		{"../etc/passwd", "leaves the workspace"},
		{"/etc/passwd", "is absolute"},
		{"out/passwd", "leaves the workspace (through a symlink)"},
		{"missing.txt", "no such file"},
	} {
		if _, err := d.api.ReadFile(ctx, ws, c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadFile(%s) = %v, want %q", c.path, err, c.want)
		}
		if err := d.api.WriteFile(ctx, ws, c.path, []byte("x")); c.path != "missing.txt" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("WriteFile(%s) = %v, want %q", c.path, err, c.want)
		}
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatal(err)
	}
	// Larger than one operation carries: streamed, nothing staged, one
	// trajectory record each.
	big := make([]byte, 5<<20+7)
	for i := range big {
		big[i] = byte(i*7 + i/4096)
	}
	before := len(trajectory(t, d, ws))
	if err := d.api.WriteFile(ctx, ws, "big.bin", big); err != nil {
		t.Fatalf("WriteFile(5 MiB) = %v", err)
	}
	if got, err := d.api.ReadFile(ctx, ws, "big.bin"); err != nil || !bytes.Equal(got, big) {
		t.Errorf("ReadFile(5 MiB) = %d bytes, %v; want what was written", len(got), err)
	}
	if recs := trajectory(t, d, ws)[before:]; len(recs) != 2 || recs[0].Kind != "file.write" || recs[1].Kind != "file.read" {
		t.Errorf("trajectory of a 5 MiB write and read = %+v, want one record each", recs)
	}
	if out := d.mustHelmr("exec", ws, "--shell", "--", "ls -A; ls -A /tmp"); strings.Contains(out, "helmr-upload") || strings.Contains(out, "tmp.") {
		t.Errorf("staging left behind: %q", out)
	}
	d.mustHelmr("exec", ws, "rm", "big.bin")

	// Tar up and down; a tar with a member leading out is refused whole.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for name, body := range map[string]string{"src/main.go": "package main\n", "src/README": "hi\n"} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	if err := d.api.UploadTar(ctx, ws, "up", tb.Bytes()); err != nil {
		t.Fatalf("UploadTar: %v", err)
	}
	if out := d.mustHelmr("exec", ws, "--", "cat", "up/src/main.go", "up/src/README"); out != "package main\nhi\n" {
		t.Errorf("unpacked tar = %q", out)
	}
	got, err := d.api.DownloadTar(ctx, ws, "up")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for tr := tar.NewReader(bytes.NewReader(got)); ; {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names[strings.TrimPrefix(h.Name, "./")] = true
	}
	if !names["src/main.go"] || !names["src/README"] {
		t.Errorf("downloaded tar holds %v", names)
	}
	var evil bytes.Buffer
	tw = tar.NewWriter(&evil)
	tw.WriteHeader(&tar.Header{Name: "ok.txt", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("x"))
	tw.WriteHeader(&tar.Header{Name: "esc", Typeflag: tar.TypeSymlink, Linkname: "/etc"})
	tw.Close()
	if err := d.api.UploadTar(ctx, ws, "evil", evil.Bytes()); err == nil || !strings.Contains(err.Error(), "outside the directory") {
		t.Errorf("UploadTar(symlink out) = %v, want refused", err)
	}
	if _, errOut, code := d.helmr("exec", ws, "--", "test", "-e", "evil/ok.txt"); code == 0 {
		t.Errorf("a refused tar left files behind (%q)", errOut)
	}

	// Streamed: the first line arrives while the command still runs (it
	// waits for a file the test creates only once it saw that line).
	var seen []workspaces.OpOutput
	sres, err := d.api.ExecStream(ctx, ws, workspaces.ExecRequest{
		Command: `echo ready; echo ${vault:TOKEN} >&2; while [ ! -e go ]; do sleep 0.1; done; rm go; printf 'done\nno newline'`, TimeoutSeconds: 60,
	}, func(o workspaces.OpOutput) {
		seen = append(seen, o)
		if o.Stream == "stdout" && o.Data == "ready\n" {
			d.mustHelmr("exec", ws, "--", "touch", "go")
		}
	})
	if err != nil || sres.ExitCode != 0 || sres.Stdout != "ready\ndone\nno newline" {
		t.Fatalf("ExecStream = %+v, %v", sres, err)
	}
	var stdout, stderr string
	for _, o := range seen {
		if o.Stream == "stderr" {
			stderr += o.Data
		} else {
			stdout += o.Data
		}
	}
	if stdout != "ready\ndone\nno newline" || stderr != "[redacted:TOKEN]\n" || len(seen) < 3 {
		t.Errorf("streamed %d pieces: stdout %q, stderr %q", len(seen), stdout, stderr)
	}

	// A workspace made empty for the task: operations first, then a run.
	var fresh workspaces.Workspace
	if err := json.Unmarshal([]byte(d.mustHelmr("workspace", "create", "notes", "--project", "workspace", "--json")), &fresh); err != nil || fresh.Host != "" {
		t.Fatalf("workspace create = %+v, %v", fresh, err)
	}
	d.mustHelmr("exec", fresh.ID, "--shell", "--", "echo seed > notes.txt")
	r = mustRun(t, d.mustHelmr("run", "notes", "--project", "workspace", "--payload-json", `{"line":"after"}`, "--workspace", fresh.ID, "--json"))
	if r = d.waitDone(r.ID, 2*time.Minute); r.Status != runs.StatusCompleted || string(r.Output) != `"seed\n"` {
		t.Errorf("run in a created workspace after an exec = %s %s %+v", r.Status, r.Output, r.Error)
	}
	if _, errOut, code := d.helmr("workspace", "create", "nosuch", "--project", "workspace"); code == 0 || !strings.Contains(errOut, "nosuch") {
		t.Errorf("workspace create for an unknown task = exit %d %q", code, errOut)
	}

	// A program that is not there is the command's failure, as in a
	// shell (127, the reason on stderr), not the service's (a 5xx that
	// harnesses retry).
	if _, errOut, code := d.helmr("exec", ws, "--", "no-such-program", "x"); code != 127 || !strings.Contains(errOut, "no-such-program") {
		t.Errorf("helmr exec of a missing program = exit %d %q, want 127 naming it", code, errOut)
	}

	// Bad input.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", ws, "--cwd", "../etc", "--", "ls"}, "must be relative to the workspace and stay inside it"},
		{[]string{"exec", ws, "--cwd", "/etc", "--", "ls"}, "must be relative to the workspace"},
		{[]string{"exec", "ws_nosuch", "--", "ls"}, "not found"},
		{[]string{"exec", ws, "--timeout", "7200", "--", "ls"}, "timeoutSeconds"},
		{[]string{"exec", ws}, "usage: helmr exec"},
	} {
		if _, errOut, code := d.helmr(c.args...); code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("helmr %s = exit %d %q, want an error containing %q", strings.Join(c.args, " "), code, errOut, c.want)
		}
	}
}

// trajectory returns a workspace's recorded operations (up to 1000).
func trajectory(t *testing.T, d *dev, ws string) []workspaces.OpRecord {
	t.Helper()
	status, body := d.get("/v1/workspaces/" + ws + "/trajectory")
	var tr struct {
		Operations []workspaces.OpRecord `json:"operations"`
	}
	if status != 200 || json.Unmarshal(body, &tr) != nil {
		t.Fatalf("trajectory = %d %s", status, body)
	}
	return tr.Operations
}
