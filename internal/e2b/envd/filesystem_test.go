package envd

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/helmr/helmr/internal/e2b/envdpb/filesystempb"
	"github.com/helmr/helmr/internal/e2b/envdpb/filesystempb/filesystempbconnect"
)

func (e *env) fs() filesystempbconnect.FilesystemClient {
	return filesystempbconnect.NewFilesystemClient(e.srv.Client(), e.srv.URL, connect.WithProtoJSON())
}

// TestFilesystemOps: stat, list (by depth), make, move and remove, at
// relative and absolute paths, with the SDK's error codes.
func TestFilesystemOps(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.write(t, "a.txt", "hello")
	e.write(t, "d/e/f.txt", "x")
	if err := os.Symlink("a.txt", filepath.Join(e.dir, "link")); err != nil {
		t.Fatal(err)
	}

	st, err := e.fs().Stat(ctx, call(&filesystempb.StatRequest{Path: "a.txt"}))
	if err != nil {
		t.Fatalf("Stat: %s", fmtErr(err))
	}
	if en := st.Msg.Entry; en.Name != "a.txt" || en.Path != e.dir+"/a.txt" || en.Type != filesystempb.FileType_FILE_TYPE_FILE ||
		en.Size != 5 || en.Mode != 0o644 || en.Permissions != "-rw-r--r--" || en.ModifiedTime == nil || en.IsSymlink {
		t.Errorf("Stat(a.txt) = %v", en)
	}
	st, err = e.fs().Stat(ctx, call(&filesystempb.StatRequest{Path: e.dir + "/link"}))
	if err != nil || !st.Msg.Entry.IsSymlink || st.Msg.Entry.GetSymlinkTarget() != "a.txt" || st.Msg.Entry.Type != filesystempb.FileType_FILE_TYPE_FILE {
		t.Errorf("Stat(link) = %v, %v; want a symlink to a file", st, err)
	}
	if _, err := e.fs().Stat(ctx, call(&filesystempb.StatRequest{Path: "nope"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("Stat(nope) = %s, want not_found", fmtErr(err))
	}

	names := func(es []*filesystempb.EntryInfo) string {
		var out []string
		for _, en := range es {
			out = append(out, strings.TrimPrefix(en.Path, e.dir+"/")+":"+en.Type.String())
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	ls, err := e.fs().ListDir(ctx, call(&filesystempb.ListDirRequest{Path: "d", Depth: 1}))
	if err != nil || names(ls.Msg.Entries) != "d/e:FILE_TYPE_DIRECTORY" {
		t.Errorf("ListDir(d, 1) = %v, %v", ls, err)
	}
	ls, err = e.fs().ListDir(ctx, call(&filesystempb.ListDirRequest{Path: e.dir + "/d", Depth: 2}))
	if err != nil || names(ls.Msg.Entries) != "d/e/f.txt:FILE_TYPE_FILE d/e:FILE_TYPE_DIRECTORY" {
		t.Errorf("ListDir(d, 2) = %v, %v", ls, err)
	}
	if _, err := e.fs().ListDir(ctx, call(&filesystempb.ListDirRequest{Path: "a.txt"})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("ListDir(a file) = %s, want invalid_argument", fmtErr(err))
	}

	mk, err := e.fs().MakeDir(ctx, call(&filesystempb.MakeDirRequest{Path: "n/m"}))
	if err != nil || mk.Msg.Entry.Type != filesystempb.FileType_FILE_TYPE_DIRECTORY || mk.Msg.Entry.Path != e.dir+"/n/m" {
		t.Errorf("MakeDir(n/m) = %v, %v", mk, err)
	}
	if fi, err := os.Stat(filepath.Join(e.dir, "n/m")); err != nil || !fi.IsDir() {
		t.Errorf("n/m after MakeDir: %v", err)
	}
	if _, err := e.fs().MakeDir(ctx, call(&filesystempb.MakeDirRequest{Path: "n/m"})); codeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("MakeDir(n/m) again = %s, want already_exists", fmtErr(err))
	}

	mv, err := e.fs().Move(ctx, call(&filesystempb.MoveRequest{Source: "a.txt", Destination: e.dir + "/n/b.txt"}))
	if err != nil || mv.Msg.Entry.Name != "b.txt" || mv.Msg.Entry.Size != 5 {
		t.Errorf("Move = %v, %v", mv, err)
	}
	if data, err := os.ReadFile(filepath.Join(e.dir, "n/b.txt")); err != nil || string(data) != "hello" {
		t.Errorf("n/b.txt after Move = %q, %v", data, err)
	}
	if _, err := e.fs().Move(ctx, call(&filesystempb.MoveRequest{Source: "a.txt", Destination: "c.txt"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("Move(a moved file) = %s, want not_found", fmtErr(err))
	}

	if _, err := e.fs().Remove(ctx, call(&filesystempb.RemoveRequest{Path: "n"})); err != nil {
		t.Errorf("Remove(n): %s", fmtErr(err))
	}
	if _, err := os.Stat(filepath.Join(e.dir, "n")); !os.IsNotExist(err) {
		t.Errorf("n after Remove: %v", err)
	}
	if _, err := e.fs().Remove(ctx, call(&filesystempb.RemoveRequest{Path: "n"})); codeOf(err) != connect.CodeNotFound {
		t.Errorf("Remove(n) again = %s, want not_found", fmtErr(err))
	}
	if k := e.traj.kinds(); k["e2b.filesystem.stat"] != 3 || k["e2b.filesystem.remove"] != 2 || k["e2b.filesystem.move"] != 2 {
		t.Errorf("trajectory kinds = %v", k)
	}
}

// TestPathsThatEscape: a path leaving the workspace, by "..", by an
// absolute path elsewhere or through a symlink, is invalid_argument (400
// on /files), and nothing outside is touched.
func TestPathsThatEscape(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.dir, "out")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../x", "a/../../x", outside + "/secret", "/etc/passwd", "out/secret", "out", ""} {
		_, err := e.fs().Stat(ctx, call(&filesystempb.StatRequest{Path: p}))
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Stat(%q) = %s, want invalid_argument", p, fmtErr(err))
		}
		_, err = e.fs().Remove(ctx, call(&filesystempb.RemoveRequest{Path: p}))
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Remove(%q) = %s, want invalid_argument", p, fmtErr(err))
		}
		_, err = e.fs().Move(ctx, call(&filesystempb.MoveRequest{Source: p, Destination: "moved"}))
		if codeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Move(%q) = %s, want invalid_argument", p, fmtErr(err))
		}
		if st, body := e.do(t, "GET", "/files?path="+url.QueryEscape(p), "", nil); st != http.StatusBadRequest {
			t.Errorf("GET /files?path=%s = %d %s, want 400", p, st, body)
		}
		if st, body := e.do(t, "POST", "/files?path="+url.QueryEscape(p+"/new"), "application/octet-stream", strings.NewReader("x")); st != http.StatusBadRequest {
			t.Errorf("POST /files?path=%s/new = %d %s, want 400", p, st, body)
		}
	}
	if _, err := e.fs().ListDir(ctx, call(&filesystempb.ListDirRequest{Path: "out"})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("ListDir(out) = %s, want invalid_argument", fmtErr(err))
	}
	if _, err := e.fs().Remove(ctx, call(&filesystempb.RemoveRequest{Path: e.dir})); codeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("Remove(the workspace) = %s, want invalid_argument", fmtErr(err))
	}
	if got, err := os.ReadDir(outside); err != nil || len(got) != 1 {
		t.Errorf("outside holds %v, %v; want the secret alone", got, err)
	}
}

// TestFilesRoundTrip: uploads (octet-stream, gzip, multipart with paths
// as file names) read back byte for byte through GET /files.
func TestFilesRoundTrip(t *testing.T) {
	e := newEnv(t)
	bin := append([]byte("bin\x00\xff\xfe\n"), bytes.Repeat([]byte("0123456789"), 50000)...)
	type entry struct{ Name, Type, Path string }
	answer := func(st int, body []byte) []entry {
		t.Helper()
		var out []entry
		if st != http.StatusOK || json.Unmarshal(body, &out) != nil {
			t.Fatalf("upload = %d %s", st, body)
		}
		return out
	}
	got := answer(e.do(t, "POST", "/files?path=up/bin.dat&username=user", "application/octet-stream", bytes.NewReader(bin)))
	if len(got) != 1 || got[0] != (entry{"bin.dat", "file", e.dir + "/up/bin.dat"}) {
		t.Errorf("octet-stream upload answered %+v", got)
	}
	st, body := e.do(t, "GET", "/files?path="+url.QueryEscape(e.dir+"/up/bin.dat"), "", nil)
	if st != http.StatusOK || !bytes.Equal(body, bin) {
		t.Errorf("download = %d, %d bytes; want the %d uploaded", st, len(body), len(bin))
	}

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped"))
	zw.Close()
	answer(e.do(t, "POST", "/files?path=z.txt", "application/octet-stream", &gz, "Content-Encoding", "gzip"))
	if data, _ := os.ReadFile(filepath.Join(e.dir, "z.txt")); string(data) != "zipped" {
		t.Errorf("gzip upload wrote %q", data)
	}

	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	for name, data := range map[string]string{e.dir + "/m/one.txt": "one", "m/sub/two.txt": "two"} {
		fw, _ := mw.CreateFormFile("file", name)
		fw.Write([]byte(data))
	}
	mw.Close()
	got = answer(e.do(t, "POST", "/files", mw.FormDataContentType(), &form))
	sort.Slice(got, func(i, j int) bool { return got[i].Path < got[j].Path })
	if len(got) != 2 || got[0].Path != e.dir+"/m/one.txt" || got[1] != (entry{"two.txt", "file", e.dir + "/m/sub/two.txt"}) {
		t.Errorf("multipart upload answered %+v", got)
	}
	for p, want := range map[string]string{"m/one.txt": "one", e.dir + "/m/sub/two.txt": "two"} {
		if st, body := e.do(t, "GET", "/files?path="+url.QueryEscape(p), "", nil); st != http.StatusOK || string(body) != want {
			t.Errorf("GET %s = %d %q, want %q", p, st, body, want)
		}
	}

	if st, body := e.do(t, "GET", "/files?path=missing", "", nil); st != http.StatusNotFound || !strings.Contains(string(body), `"code":404`) {
		t.Errorf("GET missing = %d %s, want 404 {code, message}", st, body)
	}
	if st, _ := e.do(t, "GET", "/files?path=m", "", nil); st != http.StatusBadRequest {
		t.Errorf("GET a directory = %d, want 400", st)
	}
	if k := e.traj.kinds(); k["e2b.files.write"] != 4 || k["e2b.files.read"] < 4 {
		t.Errorf("trajectory kinds = %v", k)
	}
}
