package swerex

import (
	"archive/tar"
	"archive/zip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// fileService is what the file endpoints ask of the workspaces service
// (workspaces.Service) beyond Workspaces: transfers that stream, at paths
// anywhere in the sandbox.
type fileService interface {
	ReadFileBytes(ctx context.Context, ws workspaces.Workspace, t workspaces.Transfer, max int64) ([]byte, error)
	WriteFile(ctx context.Context, ws workspaces.Workspace, t workspaces.Transfer, r io.Reader) (int64, error)
	UploadTar(ctx context.Context, ws workspaces.Workspace, t workspaces.Transfer, r io.Reader) (int64, error)
}

func (a *API) files() (fileService, error) {
	f, ok := a.ws.(fileService)
	if !ok {
		return nil, errdefs.Unavailablef("this control plane moves no files for SWE-ReX")
	}
	return f, nil
}

// readFile answers read_file: the file decoded as upstream's
// Path(path).read_text(encoding, errors) does (see decodeText).
func (a *API) readFile(r *http.Request, ws workspaces.Workspace) (any, error) {
	var req struct {
		Path     string  `json:"path"`
		Encoding *string `json:"encoding"`
		Errors   *string `json:"errors"`
	}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if req.Path == "" {
		return nil, &schemaError{"path is required"}
	}
	enc, errs := deref(req.Encoding), deref(req.Errors)
	codec, ok := lookupCodec(enc)
	if !ok {
		return nil, &swerexError{"builtins.LookupError", fmt.Sprintf("unknown encoding: %s (Helmr's read_file decodes utf-8, latin-1 and ascii)", enc)}
	}
	f, err := a.files()
	if err != nil {
		return nil, err
	}
	data, err := f.ReadFileBytes(r.Context(), ws, workspaces.Transfer{Path: req.Path, Anywhere: true, Kind: "swerex.read_file"}, workspaces.MaxFileBytes)
	if err != nil {
		return nil, fileError(req.Path, err)
	}
	text, err := decodeText(data, codec, errs)
	var de *decodeError
	var uh *unknownHandler
	switch {
	case errors.As(err, &de):
		return nil, &swerexError{"builtins.UnicodeDecodeError", de.Error()}
	case errors.As(err, &uh):
		return nil, &swerexError{"builtins.LookupError", uh.Error()}
	case err != nil:
		return nil, err
	}
	return map[string]any{"content": json.RawMessage(text)}, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// fileError is a transfer's error as SWE-ReX raises it where upstream's
// server would: Python's OSError subclasses with their errno text, a
// too large file as a SwerexException; Helmr's own (no worker, a deleted
// workspace) as the rest of the API answers them.
func fileError(p string, err error) error {
	var ce *workspaces.CommandError
	switch {
	case errors.Is(err, workspaces.ErrIsDirectory):
		return &swerexError{"builtins.IsADirectoryError", "[Errno 21] Is a directory: " + pyRepr(p)}
	case errors.Is(err, workspaces.ErrNotDirectory):
		return &swerexError{"builtins.NotADirectoryError", "[Errno 20] Not a directory: " + pyRepr(p)}
	case errors.Is(err, errdefs.ErrNotFound):
		return &swerexError{"builtins.FileNotFoundError", "[Errno 2] No such file or directory: " + pyRepr(p)}
	case errors.Is(err, errdefs.ErrTooLarge):
		return &swerexError{"swerex.exceptions.SwerexException", err.Error()}
	case errors.As(err, &ce):
		return &swerexError{"builtins.OSError", ce.Stderr}
	}
	return err
}

// writeFile answers write_file: content written (UTF-8) to path, its
// directory made, through the streaming path.
func (a *API) writeFile(r *http.Request, ws workspaces.Workspace) (any, error) {
	var req struct {
		Content *string `json:"content"`
		Path    string  `json:"path"`
	}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if req.Content == nil || req.Path == "" {
		return nil, &schemaError{"content and path are required"}
	}
	f, err := a.files()
	if err != nil {
		return nil, err
	}
	t := workspaces.Transfer{Path: req.Path, Anywhere: true, Kind: "swerex.write_file"}
	if _, err := f.WriteFile(r.Context(), ws, t, strings.NewReader(*req.Content)); err != nil {
		return nil, fileError(req.Path, err)
	}
	return map[string]any{}, nil
}

// uploadMemory is how much of an upload's form is held in memory; the
// rest of its file is spooled to disk by the multipart reader.
const uploadMemory = 1 << 20

// upload takes SWE-ReX's multipart upload: a file (or a zip of a
// directory, unzip=true) written to target_path, streamed into the
// sandbox (a zip as a tar: the sandbox's image need not have unzip).
func (a *API) upload(r *http.Request, ws workspaces.Workspace) (any, error) {
	f, err := a.files()
	if err != nil {
		return nil, err
	}
	r.Body = http.MaxBytesReader(nil, r.Body, workspaces.MaxStreamBytes+uploadMemory)
	if err := r.ParseMultipartForm(uploadMemory); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, errdefs.TooLargef("an upload is at most %d bytes", workspaces.MaxStreamBytes)
		}
		return nil, &schemaError{"the body must be a multipart form with file and target_path: " + err.Error()}
	}
	defer r.MultipartForm.RemoveAll()
	target := r.FormValue("target_path")
	file, hdr, err := r.FormFile("file")
	if err != nil || target == "" {
		return nil, &schemaError{"file and target_path are required"}
	}
	defer file.Close()
	t := workspaces.Transfer{Path: target, Anywhere: true, Kind: "swerex.upload"}
	if unzip := strings.ToLower(r.FormValue("unzip")); unzip != "true" && unzip != "1" {
		if _, err := f.WriteFile(r.Context(), ws, t, file); err != nil {
			return nil, fileError(target, err)
		}
		return map[string]any{}, nil
	}
	zr, err := zip.NewReader(file, hdr.Size)
	if err != nil {
		return nil, &swerexError{"zipfile.BadZipFile", err.Error()}
	}
	// The tar is made as the service reads it; a bad zip member stops it
	// (and its error is the answer) before the service takes the tar.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := zipToTar(zr, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	_, err = f.UploadTar(r.Context(), ws, t, pr)
	pr.CloseWithError(errors.New("the upload ended"))
	if zerr := <-done; zerr != nil && !errors.Is(zerr, io.ErrClosedPipe) {
		if _, ok := zerr.(*swerexError); ok || errdefs.Kind(zerr) != nil {
			return nil, zerr
		}
	}
	if err != nil {
		return nil, fileError(target, err)
	}
	return map[string]any{}, nil
}

// zipToTar writes the members of an uploaded zip to w as a tar of its
// directories and files (a symlink member becomes a file holding its
// target, as Python's zipfile extracts it), names kept inside the target
// directory, at most MaxStreamBytes unpacked.
func zipToTar(zr *zip.Reader, w io.Writer) error {
	tw := tar.NewWriter(w)
	total := int64(0)
	for _, zf := range zr.File {
		name := path.Clean(strings.TrimPrefix(zf.Name, "./"))
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || strings.ContainsRune(name, 0) {
			return &swerexError{"zipfile.BadZipFile", fmt.Sprintf("%s leaves the target directory", zf.Name)}
		}
		if name == "." {
			continue
		}
		if zf.FileInfo().IsDir() {
			if err := tw.WriteHeader(&tar.Header{Name: name + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: zf.Modified}); err != nil {
				return err
			}
			continue
		}
		size := int64(zf.UncompressedSize64)
		if zf.UncompressedSize64 > workspaces.MaxStreamBytes || total+size > workspaces.MaxStreamBytes {
			return errdefs.TooLargef("the zip unpacks to more than %d bytes", workspaces.MaxStreamBytes)
		}
		total += size
		mode := int64(zf.Mode().Perm())
		if zf.Mode()&fs.ModeSymlink != 0 || mode == 0 {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: size, Typeflag: tar.TypeReg, ModTime: zf.Modified}); err != nil {
			return err
		}
		rc, err := zf.Open()
		if err != nil {
			return &swerexError{"zipfile.BadZipFile", err.Error()}
		}
		// The zip's reader checks the size and checksum its header gives.
		_, err = io.Copy(tw, rc)
		rc.Close()
		if err != nil {
			return &swerexError{"zipfile.BadZipFile", fmt.Sprintf("%s: %v", zf.Name, err)}
		}
	}
	return tw.Close()
}
