package swerex

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
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

func (a *API) readFile(r *http.Request, ws workspaces.Workspace) (any, error) {
	var req struct {
		Path string `json:"path"`
	}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if req.Path == "" {
		return nil, &schemaError{"path is required"}
	}
	res, err := a.ws.ExecOutput(r.Context(), ws, workspaces.ExecRequest{Argv: []string{"base64", "-w0", "--", req.Path}},
		workspaces.Trace{Kind: "swerex.read_file", Request: map[string]any{"path": req.Path}},
		workspaces.MaxFileBase64, fmt.Sprintf("%s is larger than %d bytes: read it in parts with execute", req.Path, workspaces.MaxFileBytes))
	if errors.Is(err, errdefs.ErrTooLarge) {
		return nil, &swerexError{"swerex.exceptions.SwerexException", err.Error()}
	}
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, &swerexError{"builtins.FileNotFoundError", strings.TrimSpace(res.Stderr)}
	}
	data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(res.Stdout))
	if err != nil {
		return nil, errdefs.Upstreamf("%s came back garbled: %v", req.Path, err)
	}
	return map[string]any{"content": string(data)}, nil
}

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
	if err := a.put(r.Context(), ws, req.Path, []byte(*req.Content)); err != nil {
		return nil, err
	}
	return map[string]any{}, nil
}

// put writes data to p in the workspace's sandbox, making its directory.
func (a *API) put(ctx context.Context, ws workspaces.Workspace, p string, data []byte) error {
	if len(data) > workspaces.MaxFileBytes {
		return errdefs.TooLargef("%s: %d bytes, more than the %d one write takes", p, len(data), workspaces.MaxFileBytes)
	}
	res, err := a.ws.ExecStdin(ctx, ws, workspaces.ExecRequest{
		Argv:  []string{"sh", "-c", `mkdir -p "$(dirname "$1")" && base64 -d > "$1"`, "sh", p},
		Stdin: base64.StdEncoding.EncodeToString(data),
	}, workspaces.Trace{Kind: "swerex.write_file", Request: map[string]any{"path": p, "bytes": len(data)}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &swerexError{"builtins.OSError", strings.TrimSpace(res.Stderr)}
	}
	return nil
}

// upload takes SWE-ReX's multipart upload: a file (or a zip of a
// directory, unzip=true) written to target_path.
func (a *API) upload(r *http.Request, ws workspaces.Workspace) (any, error) {
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		return nil, &schemaError{"the body must be a multipart form with file and target_path: " + err.Error()}
	}
	target := r.FormValue("target_path")
	f, _, err := r.FormFile("file")
	if err != nil || target == "" {
		return nil, &schemaError{"file and target_path are required"}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, workspaces.MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > workspaces.MaxFileBytes {
		return nil, errdefs.TooLargef("an upload is at most %d bytes", workspaces.MaxFileBytes)
	}
	if r.FormValue("unzip") != "true" && r.FormValue("unzip") != "True" {
		return map[string]any{}, a.put(r.Context(), ws, target, data)
	}
	tarData, err := zipToTar(data)
	if err != nil {
		return nil, err
	}
	// One operation unpacks the whole directory (as a tar: the sandbox's
	// image need not have unzip).
	res, err := a.ws.ExecStdin(r.Context(), ws, workspaces.ExecRequest{
		Argv:  []string{"sh", "-c", `mkdir -p -- "$1" && base64 -d | tar -C "$1" -xf - --no-same-owner --no-same-permissions`, "sh", target},
		Stdin: base64.StdEncoding.EncodeToString(tarData),
	}, workspaces.Trace{Kind: "swerex.upload", Request: map[string]any{"target_path": target, "unzip": true, "bytes": len(data)}})
	if err != nil {
		return nil, err
	}
	if res.ExitCode != 0 {
		return nil, &swerexError{"builtins.OSError", strings.TrimSpace(res.Stderr)}
	}
	return map[string]any{}, nil
}

// zipToTar turns an uploaded zip into a tar of its directories and files
// (a symlink member becomes a file holding its target, as Python's
// zipfile extracts it), names kept inside the target directory, at most
// MaxFileBytes unpacked.
func zipToTar(data []byte) ([]byte, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, &swerexError{"zipfile.BadZipFile", err.Error()}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	total := int64(0)
	for _, zf := range zr.File {
		name := path.Clean(strings.TrimPrefix(zf.Name, "./"))
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || strings.ContainsRune(name, 0) {
			return nil, &swerexError{"zipfile.BadZipFile", fmt.Sprintf("%s leaves the target directory", zf.Name)}
		}
		if name == "." {
			continue
		}
		if zf.FileInfo().IsDir() {
			if err := tw.WriteHeader(&tar.Header{Name: name + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: zf.Modified}); err != nil {
				return nil, err
			}
			continue
		}
		rc, err := zf.Open()
		if err != nil {
			return nil, &swerexError{"zipfile.BadZipFile", err.Error()}
		}
		content, err := io.ReadAll(io.LimitReader(rc, workspaces.MaxFileBytes-total+1))
		rc.Close()
		if err != nil {
			return nil, &swerexError{"zipfile.BadZipFile", fmt.Sprintf("%s: %v", zf.Name, err)}
		}
		if total += int64(len(content)); total > workspaces.MaxFileBytes {
			return nil, errdefs.TooLargef("the zip unpacks to more than %d bytes", workspaces.MaxFileBytes)
		}
		mode := int64(zf.Mode().Perm())
		if zf.Mode()&fs.ModeSymlink != 0 || mode == 0 {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(content)), Typeflag: tar.TypeReg, ModTime: zf.Modified}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(content); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
