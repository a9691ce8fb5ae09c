package swerex

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// hostFiles is the workspaces service's file transfers on the host's
// files (paths anywhere, as SWE-ReX's are), recording what it was asked.
type hostFiles struct {
	Workspaces // the rest is not used by the file endpoints
	tars       map[string][]byte
	kinds      []string
}

func (h *hostFiles) ReadFileBytes(_ context.Context, _ workspaces.Workspace, t workspaces.Transfer, max int64) ([]byte, error) {
	h.kinds = append(h.kinds, t.Kind)
	st, err := os.Stat(t.Path)
	switch {
	case err != nil:
		return nil, errdefs.NotFoundf("%s: no such file", t.Path)
	case st.IsDir():
		return nil, errdefs.Newf(errdefs.ErrInvalid, "%s: %w", t.Path, workspaces.ErrIsDirectory)
	case st.Size() > max:
		return nil, errdefs.TooLargef("%s is larger than %d bytes", t.Path, max)
	}
	return os.ReadFile(t.Path)
}

func (h *hostFiles) WriteFile(_ context.Context, _ workspaces.Workspace, t workspaces.Transfer, r io.Reader) (int64, error) {
	h.kinds = append(h.kinds, t.Kind)
	if !t.Anywhere || !filepath.IsAbs(t.Path) {
		return 0, fmt.Errorf("WriteFile(%+v): want an absolute path, anywhere", t)
	}
	if err := os.MkdirAll(filepath.Dir(t.Path), 0o755); err != nil {
		return 0, err
	}
	f, err := os.Create(t.Path)
	if err != nil {
		return 0, errdefs.Newf(errdefs.ErrUpstream, "%w", &workspaces.CommandError{Path: t.Path, ExitCode: 1, Stderr: err.Error()})
	}
	defer f.Close()
	return io.Copy(f, r)
}

func (h *hostFiles) UploadTar(_ context.Context, _ workspaces.Workspace, t workspaces.Transfer, r io.Reader) (int64, error) {
	h.kinds = append(h.kinds, t.Kind)
	data, err := io.ReadAll(r)
	if err != nil {
		return 0, errdefs.Invalidf("read the tar: %v", err)
	}
	if err := workspaces.CheckTar(data); err != nil {
		return 0, errdefs.Invalidf("the tar: %v", err)
	}
	h.tars[t.Path] = data
	return int64(len(data)), nil
}

// post sends body to endpoint h and returns the status and raw answer.
func post(t *testing.T, h Handler, ctype, body string) (int, string, error) {
	t.Helper()
	req := httptest.NewRequest("POST", "/v1/swerex/ws_test/x", strings.NewReader(body))
	req.Header.Set("Content-Type", ctype)
	rec := httptest.NewRecorder()
	if err := h(rec, req, workspaces.Workspace{ID: "ws_test"}); err != nil {
		return 0, "", err
	}
	return rec.Code, rec.Body.String(), nil
}

// TestReadFileDecodes: read_file decodes as Path.read_text(encoding,
// errors) does (the expectations are CPython 3.11's), universal newlines
// included, and raises what it raises.
func TestReadFileDecodes(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	text := write("text", []byte("caf\xc3\xa9\r\nline2\rx\t\"q\"\\"))
	bad := write("bad", []byte("a\xffb"))
	cut := write("cut", []byte("\xe2\x82"))
	mixed := write("mixed", []byte("\xe2\x82(\xe0\x80"))
	esc := write("esc", []byte("a\xff\xe2\x82b"))
	files := &hostFiles{}
	a := New(files)
	for _, c := range []struct {
		name, path, encoding, errors string
		want                         string // the content, or class: message
	}{
		{"utf-8 default", text, "", "", "café\nline2\nx\t\"q\"\\"},
		{"utf-8 alias", text, "UTF8", "strict", "café\nline2\nx\t\"q\"\\"},
		{"strict", bad, "utf-8", "", "builtins.UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 1: invalid start byte"},
		{"end of data", cut, "", "", "builtins.UnicodeDecodeError: 'utf-8' codec can't decode bytes in position 0-1: unexpected end of data"},
		{"replace", mixed, "", "replace", "\ufffd(\ufffd\ufffd"},
		{"ignore", bad, "", "ignore", "ab"},
		{"backslashreplace", bad, "", "backslashreplace", `a\xffb`},
		{"latin-1", bad, "iso-8859-1", "", "a\u00ffb"},
		{"ascii", bad, "ascii", "", "builtins.UnicodeDecodeError: 'ascii' codec can't decode byte 0xff in position 1: ordinal not in range(128)"},
		{"unknown handler, unused", text, "", "bogus", "café\nline2\nx\t\"q\"\\"},
		{"unknown handler, used", bad, "", "bogus", "builtins.LookupError: unknown error handler name 'bogus'"},
		{"unknown encoding", text, "klingon", "", "builtins.LookupError: unknown encoding: klingon"},
		{"missing", filepath.Join(dir, "nope"), "", "", "builtins.FileNotFoundError: [Errno 2] No such file or directory: '" + filepath.Join(dir, "nope") + "'"},
		{"directory", dir, "", "", "builtins.IsADirectoryError: [Errno 21] Is a directory: '" + dir + "'"},
	} {
		body, _ := json.Marshal(map[string]any{"path": c.path, "encoding": nilIfEmpty(c.encoding), "errors": nilIfEmpty(c.errors)})
		st, out, err := post(t, a.ReadFile, "application/json", string(body))
		if err != nil {
			t.Errorf("%s: read_file = %v", c.name, err)
			continue
		}
		var ans struct {
			Content string `json:"content"`
			Exc     *struct {
				Message   string `json:"message"`
				ClassPath string `json:"class_path"`
			} `json:"swerexception"`
		}
		if err := json.Unmarshal([]byte(out), &ans); err != nil {
			t.Fatalf("%s: answer %q: %v", c.name, out, err)
		}
		got := ans.Content
		if ans.Exc != nil {
			got = ans.Exc.ClassPath + ": " + ans.Exc.Message
		}
		if !strings.HasPrefix(got, c.want) || (ans.Exc == nil) != (st == http.StatusOK) {
			t.Errorf("%s: read_file = %d %q, want %q", c.name, st, got, c.want)
		}
	}
	// surrogateescape: lone surrogates, which only JSON escapes can carry
	// (Python's json.loads gives them back).
	st, out, err := post(t, a.ReadFile, "application/json", `{"path": "`+esc+`", "errors": "surrogateescape"}`)
	if err != nil || st != http.StatusOK || out != `{"content":"a\udcff\udce2\udc82b"}` {
		t.Errorf("read_file surrogateescape = %d %s %v", st, out, err)
	}
	if files.kinds[0] != "swerex.read_file" {
		t.Errorf("read_file's transfer kind = %q", files.kinds[0])
	}
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// TestWriteAndUpload: write_file and upload write at absolute paths
// through the service's transfers; a zip upload becomes a tar of its
// members; errors come back in SWE-ReX's shapes.
func TestWriteAndUpload(t *testing.T) {
	dir := t.TempDir()
	files := &hostFiles{tars: map[string][]byte{}}
	a := New(files)
	target := filepath.Join(dir, "root/state.json")
	if st, out, err := post(t, a.WriteFile, "application/json", `{"path": "`+target+`", "content": "{\"a\": 1}"}`); err != nil || st != http.StatusOK || out != "{}" {
		t.Fatalf("write_file = %d %s %v", st, out, err)
	}
	if got, _ := os.ReadFile(target); string(got) != `{"a": 1}` {
		t.Errorf("write_file wrote %q", got)
	}
	if st, out, _ := post(t, a.WriteFile, "application/json", `{"path": "`+dir+`", "content": "x"}`); st != 511 || !strings.Contains(out, "builtins.OSError") {
		t.Errorf("write_file onto a directory = %d %s, want an OSError", st, out)
	}
	if st, out, _ := post(t, a.WriteFile, "application/json", `{"path": "/x"}`); st != http.StatusUnprocessableEntity {
		t.Errorf("write_file without content = %d %s, want 422", st, out)
	}

	multipartBody := func(file []byte, fields ...string) (string, string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		fw, _ := mw.CreateFormFile("file", "x")
		fw.Write(file)
		for i := 0; i+1 < len(fields); i += 2 {
			mw.WriteField(fields[i], fields[i+1])
		}
		mw.Close()
		return mw.FormDataContentType(), b.String()
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 200<<10) // 3.2 MiB: past the form's memory
	ctype, body := multipartBody(big, "target_path", filepath.Join(dir, "up/big.bin"))
	if st, out, err := post(t, a.Upload, ctype, body); err != nil || st != http.StatusOK {
		t.Fatalf("upload = %d %s %v", st, out, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "up/big.bin")); !bytes.Equal(got, big) {
		t.Errorf("upload wrote %d bytes, want %d", len(got), len(big))
	}

	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	zw.Create("tools/")
	w, _ := zw.Create("tools/bin/run")
	w.Write([]byte("#!/bin/sh\n"))
	zw.Close()
	ctype, body = multipartBody(zb.Bytes(), "target_path", "/root/tools/edit", "unzip", "true")
	if st, out, err := post(t, a.Upload, ctype, body); err != nil || st != http.StatusOK {
		t.Fatalf("upload unzip = %d %s %v", st, out, err)
	}
	if names := tarNames(t, files.tars["/root/tools/edit"]); names != "tools/,tools/bin/run" {
		t.Errorf("the zip went up as a tar of %q", names)
	}
	zb.Reset()
	zw = zip.NewWriter(&zb)
	zw.Create("../escape")
	zw.Close()
	ctype, body = multipartBody(zb.Bytes(), "target_path", "/root/x", "unzip", "true")
	if st, out, _ := post(t, a.Upload, ctype, body); st != 511 || !strings.Contains(out, "zipfile.BadZipFile") {
		t.Errorf("upload of a zip leading out = %d %s, want BadZipFile", st, out)
	}
	ctype, body = multipartBody([]byte("not a zip"), "target_path", "/root/x", "unzip", "true")
	if st, out, _ := post(t, a.Upload, ctype, body); st != 511 || !strings.Contains(out, "zipfile.BadZipFile") {
		t.Errorf("upload of a bad zip = %d %s, want BadZipFile", st, out)
	}
	if st, _, _ := post(t, a.Upload, "text/plain", "nope"); st != http.StatusUnprocessableEntity {
		t.Errorf("upload without a form = %d, want 422", st)
	}
	for _, k := range files.kinds {
		if k != "swerex.write_file" && k != "swerex.upload" {
			t.Errorf("transfer kind %q", k)
		}
	}
}

func tarNames(t *testing.T, data []byte) string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return strings.Join(names, ",")
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
}

func TestZipToTar(t *testing.T) {
	zipOf := func(add func(zw *zip.Writer)) *zip.Reader {
		var b bytes.Buffer
		zw := zip.NewWriter(&b)
		add(zw)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		zr, err := zip.NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()))
		if err != nil {
			t.Fatal(err)
		}
		return zr
	}
	good := zipOf(func(zw *zip.Writer) {
		zw.Create("dir/")
		w, _ := zw.Create("dir/a.txt")
		w.Write([]byte("A"))
		h := &zip.FileHeader{Name: "run.sh"}
		h.SetMode(0o755)
		w, _ = zw.CreateHeader(h)
		w.Write([]byte("#!/bin/sh\n"))
		h = &zip.FileHeader{Name: "link"}
		h.SetMode(fs.ModeSymlink | 0o777)
		w, _ = zw.CreateHeader(h)
		w.Write([]byte("/etc/passwd"))
	})
	var out bytes.Buffer
	if err := zipToTar(good, &out); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(out.Bytes()))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = string(rune(h.Typeflag)) + " " + fs.FileMode(h.Mode).String() + " " + string(body)
	}
	want := map[string]string{"dir/": "5 -rwxr-xr-x ", "dir/a.txt": "0 -rw-rw-rw- A", "run.sh": "0 -rwxr-xr-x #!/bin/sh\n", "link": "0 -rw-r--r-- /etc/passwd"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("member %s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("members = %v", got)
	}
	if err := workspaces.CheckTar(out.Bytes()); err != nil {
		t.Errorf("CheckTar(converted) = %v", err)
	}
	for name, z := range map[string]*zip.Reader{
		"dotdot":   zipOf(func(zw *zip.Writer) { zw.Create("../out.txt") }),
		"absolute": zipOf(func(zw *zip.Writer) { zw.Create("/etc/x") }),
	} {
		if err := zipToTar(z, io.Discard); err == nil {
			t.Errorf("zipToTar(%s) = nil error", name)
		}
	}
}
