package swerex

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"io"
	"io/fs"
	"testing"

	"github.com/helmr/helmr/internal/workspaces"
)

func TestZipToTar(t *testing.T) {
	zipOf := func(add func(zw *zip.Writer)) []byte {
		var b bytes.Buffer
		zw := zip.NewWriter(&b)
		add(zw)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
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
	data, err := zipToTar(good)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
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
	if err := workspaces.CheckTar(data); err != nil {
		t.Errorf("CheckTar(converted) = %v", err)
	}

	for name, z := range map[string][]byte{
		"dotdot":    zipOf(func(zw *zip.Writer) { zw.Create("../out.txt") }),
		"absolute":  zipOf(func(zw *zip.Writer) { zw.Create("/etc/x") }),
		"not a zip": []byte("nope"),
	} {
		if _, err := zipToTar(z); err == nil {
			t.Errorf("zipToTar(%s) = nil error", name)
		}
	}
}
