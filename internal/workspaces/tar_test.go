package workspaces

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"
)

func TestCheckTar(t *testing.T) {
	mk := func(hs ...tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hs {
			h := h
			if h.Typeflag == tar.TypeReg {
				h.Size = 1
			}
			tw.WriteHeader(&h)
			if h.Typeflag == tar.TypeReg {
				tw.Write([]byte("x"))
			}
		}
		tw.Close()
		return b.Bytes()
	}
	reg := func(n string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644} }
	for _, c := range []struct {
		name string
		data []byte
		want string // "" = accepted
	}{
		{"files and dirs", mk(tar.Header{Name: "./d/", Typeflag: tar.TypeDir, Mode: 0o755}, reg("./d/f"), reg("g")), ""},
		{"link inside", mk(reg("a"), tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "../a"}), ""},
		{"absolute", mk(reg("/etc/passwd")), "leaves the directory"},
		{"dot-dot", mk(reg("a/../../x")), "leaves the directory"},
		{"symlink out", mk(tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc"}), "outside the directory"},
		{"symlink up", mk(tar.Header{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}), "outside the directory"},
		{"hard link out", mk(tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../x"}), "outside the directory"},
		{"device", mk(tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}), "only files, directories and links"},
		{"empty", mk(), "no files"},
		{"not a tar", []byte("hello, this is not a tar archive at all........"), "not a tar"},
	} {
		err := CheckTar(c.data)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: CheckTar = %v, want %q", c.name, err, c.want)
		}
	}
}
