package workspaces

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/helmr/helmr/internal/errdefs"
)

// File operations on a workspace run as direct operations too: a script
// in the sandbox resolves the path (symlinks included) against the
// workspace (the directory operations start in) and refuses one that
// leaves it. Contents travel base64-encoded through the command's
// streams, in parts when larger than one operation carries (see
// ExecStdin and ExecOutput).

// MaxFileBytes bounds a file or tar read or written through the API.
const MaxFileBytes = 64 << 20

// MaxFileBase64 is the length of MaxFileBytes in base64.
const MaxFileBase64 = (MaxFileBytes + 2) / 3 * 4

// fileScript resolves $1 against the workspace and runs the rest of the
// script with the result in $p; exit 77 when the path leaves the
// workspace, 78 when what the script wants is not there.
const fileScript = `ws=$(pwd -P); p=$(realpath -m -- "$ws/$1") || exit 76
case "$p" in "$ws"|"$ws"/*) ;; *) echo "the path leaves the workspace" >&2; exit 77;; esac
`

// ReadFile returns the bytes of the file at rel (relative to the
// workspace), at most MaxFileBytes.
func (s *Service) ReadFile(ctx context.Context, ws Workspace, rel string) ([]byte, error) {
	return s.fetch(ctx, ws, "file.read", rel, `[ -f "$p" ] || { echo "no such file" >&2; exit 78; }
[ "$(stat -c %s -- "$p")" -le `+fmt.Sprint(MaxFileBytes)+` ] || exit 79
base64 -w0 -- "$p"`, "read it in parts with exec")
}

// WriteFile writes data to the file at rel, making its directories.
func (s *Service) WriteFile(ctx context.Context, ws Workspace, rel string, data []byte) error {
	return s.put(ctx, ws, "file.write", rel, `[ ! -d "$p" ] || { echo "is a directory" >&2; exit 80; }
mkdir -p -- "$(dirname -- "$p")" && base64 -d > "$p"`, data, nil)
}

// Dir is a directory listing.
type Dir struct {
	Path    string     `json:"path"`
	Entries []DirEntry `json:"entries"`
}

// DirEntry is one entry of a workspace directory listing.
type DirEntry struct {
	Name string `json:"name"`
	Type string `json:"type"` // file, dir, symlink, other
	Size int64  `json:"size"`
	Mode string `json:"mode"`
}

// ListDir lists the directory at rel ("": the workspace itself), by name.
func (s *Service) ListDir(ctx context.Context, ws Workspace, rel string) (Dir, error) {
	rel = orDot(rel)
	res, err := s.fileOp(ctx, ws, "file.list", rel, `[ -d "$p" ] || { echo "no such directory" >&2; exit 78; }
find "$p" -mindepth 1 -maxdepth 1 -printf '%y\t%s\t%m\t%f\0' | head -c `+fmt.Sprint(MaxOutputBytes-1024), nil, "")
	if err != nil {
		return Dir{}, err
	}
	entries := []DirEntry{}
	for _, rec := range strings.Split(res.Stdout, "\x00") {
		parts := strings.SplitN(rec, "\t", 4)
		if len(parts) != 4 {
			continue
		}
		e := DirEntry{Name: parts[3], Mode: parts[2]}
		fmt.Sscanf(parts[1], "%d", &e.Size)
		switch parts[0] {
		case "f":
			e.Type = "file"
		case "d":
			e.Type = "dir"
		case "l":
			e.Type = "symlink"
		default:
			e.Type = "other"
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	return Dir{Path: rel, Entries: entries}, nil
}

// DownloadTar returns a tar of the directory at rel ("": all of the
// workspace), at most MaxFileBytes.
func (s *Service) DownloadTar(ctx context.Context, ws Workspace, rel string) ([]byte, error) {
	return s.fetch(ctx, ws, "tar.download", orDot(rel), `[ -d "$p" ] || { echo "no such directory" >&2; exit 78; }
t=$(mktemp) && tar -C "$p" -cf "$t" . && base64 -w0 "$t"; rc=$?; rm -f "$t"; exit $rc`, "download a smaller directory")
}

// UploadTar unpacks a tar into the directory at rel ("": the workspace),
// making it. Every member must stay inside it: no absolute or ".." names,
// no links that lead out, no devices.
func (s *Service) UploadTar(ctx context.Context, ws Workspace, rel string, data []byte) error {
	return s.put(ctx, ws, "tar.upload", orDot(rel), `mkdir -p -- "$p" && base64 -d | tar -C "$p" -xf - --no-same-owner --no-same-permissions`, data,
		func(data []byte) error {
			if err := CheckTar(data); err != nil {
				return errors.New("the tar: " + err.Error())
			}
			return nil
		})
}

// fetch runs a file script that prints bytes base64-encoded and returns
// them; more than MaxFileBytes is errdefs.ErrTooLarge saying tooLarge.
func (s *Service) fetch(ctx context.Context, ws Workspace, kind, rel, script, tooLarge string) ([]byte, error) {
	res, err := s.fileOp(ctx, ws, kind, rel, script, nil, tooLarge)
	if err != nil {
		return nil, err
	}
	if res.StdoutTruncated {
		return nil, errdefs.TooLargef("%s is larger than %d bytes: %s", rel, MaxFileBytes, tooLarge)
	}
	data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(res.Stdout))
	if err != nil {
		return nil, errdefs.Upstreamf("%s came back garbled: %v", rel, err)
	}
	return data, nil
}

// put runs a file script with data (at most MaxFileBytes) base64-encoded
// on its standard input; check, if set, vets data.
func (s *Service) put(ctx context.Context, ws Workspace, kind, rel, script string, data []byte, check func([]byte) error) error {
	if len(data) > MaxFileBytes {
		return errdefs.TooLargef("a file or tar sent through the API is at most %d bytes", MaxFileBytes)
	}
	if check != nil {
		if err := check(data); err != nil {
			return errdefs.Invalidf("%w", err)
		}
	}
	_, err := s.fileOp(ctx, ws, kind, rel, script, data, "")
	return err
}

// fileOp runs script (after fileScript) on the workspace's path rel,
// with data (if any) base64-encoded on its standard input. tooLarge, if
// set, says the script prints up to MaxFileBytes base64-encoded (more is
// errdefs.ErrTooLarge saying tooLarge).
func (s *Service) fileOp(ctx context.Context, ws Workspace, kind, rel, script string, data []byte, tooLarge string) (res ExecResult, err error) {
	if err := checkRelPath(rel); err != nil {
		return ExecResult{}, errdefs.Invalidf("%w", err)
	}
	req := ExecRequest{Argv: []string{"sh", "-c", fileScript + script, "sh", rel}, Stdin: base64.StdEncoding.EncodeToString(data)}
	tr := Trace{Kind: kind, Request: map[string]any{"path": rel, "bytes": len(data)}}
	if tooLarge != "" {
		res, err = s.ExecOutput(ctx, ws, req, tr, MaxFileBase64, fmt.Sprintf("%s is larger than %d bytes: %s", rel, MaxFileBytes, tooLarge))
	} else {
		res, err = s.ExecStdin(ctx, ws, req, tr)
	}
	if err != nil {
		return res, err
	}
	switch res.ExitCode {
	case 0:
		return res, nil
	case 77:
		return res, errdefs.Invalidf("path %q leaves the workspace (through a symlink)", rel)
	case 78:
		return res, errdefs.NotFoundf("%s: %s", rel, strings.TrimSpace(res.Stderr))
	case 79:
		return res, errdefs.TooLargef("%s is larger than %d bytes: %s", rel, MaxFileBytes, tooLarge)
	}
	return res, errdefs.Upstreamf("%s: exit %d: %s", rel, res.ExitCode, strings.TrimSpace(res.Stderr))
}

// checkRelPath rejects a path that is not relative to the workspace.
func checkRelPath(p string) error {
	c := path.Clean(p)
	switch {
	case p == "":
		return errors.New("the path query parameter is required")
	case strings.ContainsRune(p, 0):
		return errors.New("the path holds a NUL byte")
	case path.IsAbs(p):
		return fmt.Errorf("path %q is absolute: give it relative to the workspace", p)
	case c == ".." || strings.HasPrefix(c, "../"):
		return fmt.Errorf("path %q leaves the workspace", p)
	}
	return nil
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// CheckTar refuses a tar with a member that would land outside the
// directory it is unpacked in.
func CheckTar(data []byte) error {
	tr := tar.NewReader(bytes.NewReader(data))
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			if n == 0 {
				return errors.New("it holds no files")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("not a tar archive: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if path.IsAbs(h.Name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("member %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir:
		case tar.TypeSymlink, tar.TypeLink:
			target := h.Linkname
			if h.Typeflag == tar.TypeSymlink {
				target = path.Join(path.Dir(name), h.Linkname)
			}
			if path.IsAbs(h.Linkname) || target == ".." || strings.HasPrefix(path.Clean(target), "../") {
				return fmt.Errorf("member %q links to %q, outside the directory", h.Name, h.Linkname)
			}
		default:
			return fmt.Errorf("member %q is a %c entry: only files, directories and links inside are taken", h.Name, h.Typeflag)
		}
	}
}
