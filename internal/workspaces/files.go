package workspaces

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/helmr/helmr/internal/errdefs"
)

// File operations on a workspace run as direct operations too. Reading
// and writing files and tars are data operations (see Ops.DoData): their
// bytes stream between the API request and the command in the sandbox
// (`cat`, `tar`), never inside an operation. A script in the sandbox
// resolves a workspace-relative path (symlinks included) against the
// workspace (the directory operations start in) and refuses one that
// leaves it; an absolute path (SWE-ReX's) is taken as it is, anywhere in
// the sandbox.

// MaxFileBytes bounds a file held whole in memory on its way: SWE-ReX's
// read_file and write_file, whose contents travel inside JSON.
const MaxFileBytes = 64 << 20

// MaxStreamBytes bounds a file or tar streamed through the files API (and
// SWE-ReX's upload): 1 GiB. Streams hold no more than a chunk in the
// control plane; the bound is for what a workspace's quota and a worker
// take in one transfer (the agent queues a download's output in the
// worker's memory when the client reads it slower than the sandbox
// writes it).
const MaxStreamBytes = 1 << 30

// Transfer names what a data operation reads or writes in a workspace's
// sandbox.
type Transfer struct {
	// Path is relative to the workspace ("" or "." for the workspace
	// itself, as a directory), refused when it leaves it, symlinks
	// included; with Anywhere, it is anywhere in the sandbox (absolute,
	// or relative to the workspace's directory, unchecked).
	Path     string
	Anywhere bool
	// Kind names the operation in the trajectory; default file.read,
	// file.write, tar.download or tar.upload.
	Kind string
}

// fileScript resolves $1 against the workspace and runs the rest of the
// script with the result in $p; exit 77 when the path leaves the
// workspace, 78 when what the script wants is not there, 79 when it is
// too large, 80 when it is a directory (or not one) against the script's
// wish.
const fileScript = `ws=$(pwd -P); p=$(realpath -m -- "$ws/$1") || exit 76
case "$p" in "$ws"|"$ws"/*) ;; *) echo "the path leaves the workspace" >&2; exit 77;; esac
`

// anywhereScript takes $1 as it is as $p.
const anywhereScript = `p=$1
`

// Scripts of the data operations, after fileScript or anywhereScript.
var (
	readScript = `[ -e "$p" ] || { echo "no such file" >&2; exit 78; }
[ ! -d "$p" ] || { echo "is a directory" >&2; exit 80; }
[ "$(stat -L -c %s -- "$p")" -le ` + fmt.Sprint(MaxStreamBytes) + ` ] || exit 79
exec cat -- "$p"`
	writeScript = `[ ! -d "$p" ] || { echo "is a directory" >&2; exit 80; }
mkdir -p -- "$(dirname -- "$p")" && exec cat > "$p"`
	tarOutScript = `[ -e "$p" ] || { echo "no such directory" >&2; exit 78; }
[ -d "$p" ] || { echo "not a directory" >&2; exit 80; }
exec tar -C "$p" -cf - .`
	tarInScript = `mkdir -p -- "$p" && exec tar -C "$p" -xf - --no-same-owner --no-same-permissions`
)

// ReadFile streams the file t names to w, at most MaxStreamBytes, and
// returns its size. Nothing is written to w before the file is found; a
// failure after bytes went to w is still an error.
func (s *Service) ReadFile(ctx context.Context, ws Workspace, t Transfer, w io.Writer) (int64, error) {
	return s.transfer(ctx, ws, t, "file.read", readScript, nil, &limitWriter{w: w, n: MaxStreamBytes, what: t.Path})
}

// WriteFile writes what r holds (at most MaxStreamBytes) to the file t
// names, making its directories, and returns its size. A stream that
// fails part way leaves what came of it in the file, and is an error.
func (s *Service) WriteFile(ctx context.Context, ws Workspace, t Transfer, r io.Reader) (int64, error) {
	return s.transfer(ctx, ws, t, "file.write", writeScript, &limitReader{r: r, n: MaxStreamBytes}, nil)
}

// ReadFileBytes returns the file t names, at most max bytes (more is
// errdefs.ErrTooLarge).
func (s *Service) ReadFileBytes(ctx context.Context, ws Workspace, t Transfer, max int64) ([]byte, error) {
	var buf bytes.Buffer
	_, err := s.transfer(ctx, ws, t, "file.read", readScript, nil, &limitWriter{w: &buf, n: max, what: t.Path})
	return buf.Bytes(), err
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
find "$p" -mindepth 1 -maxdepth 1 -printf '%y\t%s\t%m\t%f\0' | head -c `+fmt.Sprint(MaxOutputBytes-1024))
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

// DownloadTar streams a tar of the directory t names ("": all of the
// workspace) to w, at most MaxStreamBytes, and returns its size.
func (s *Service) DownloadTar(ctx context.Context, ws Workspace, t Transfer, w io.Writer) (int64, error) {
	t.Path = orDot(t.Path)
	return s.transfer(ctx, ws, t, "tar.download", tarOutScript, nil, &limitWriter{w: w, n: MaxStreamBytes, what: t.Path})
}

// UploadTar unpacks the tar r holds (at most MaxStreamBytes) into the
// directory t names ("": the workspace), making it. Every member must
// stay inside it: no absolute or ".." names, no links that lead out, no
// devices. The tar is taken whole or not at all: it is spooled to a
// temporary file here (SpoolDir) and checked before any of it reaches the
// sandbox, then streamed from there.
func (s *Service) UploadTar(ctx context.Context, ws Workspace, t Transfer, r io.Reader) (int64, error) {
	t.Path = orDot(t.Path)
	if _, err := t.argv(""); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(s.SpoolDir, "helmr-tar-*")
	if err != nil {
		return 0, fmt.Errorf("spool the tar: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := io.Copy(f, &limitReader{r: r, n: MaxStreamBytes}); err != nil {
		if errdefs.Kind(err) == nil {
			err = errdefs.Invalidf("read the tar: %v", err)
		}
		return 0, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	if err := checkTar(f); err != nil {
		return 0, errdefs.Invalidf("the tar: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	return s.transfer(ctx, ws, t, "tar.upload", tarInScript, f, nil)
}

// argv is the command running script on t's path; an invalid path is
// errdefs.ErrInvalid.
func (t Transfer) argv(script string) ([]string, error) {
	if !t.Anywhere {
		if err := checkRelPath(t.Path); err != nil {
			return nil, errdefs.Invalidf("%w", err)
		}
		return []string{"sh", "-c", fileScript + script, "sh", t.Path}, nil
	}
	switch {
	case t.Path == "":
		return nil, errdefs.Invalidf("the path is required")
	case strings.ContainsRune(t.Path, 0):
		return nil, errdefs.Invalidf("the path holds a NUL byte")
	}
	return []string{"sh", "-c", anywhereScript + script, "sh", t.Path}, nil
}

// transfer runs a data operation: script on t's path, its stdin streamed
// from in or its stdout to out; the trajectory records the path and the
// bytes moved, never the bytes. It returns the bytes moved.
func (s *Service) transfer(ctx context.Context, ws Workspace, t Transfer, kind, script string, in io.Reader, out io.Writer) (n int64, err error) {
	if t.Kind != "" {
		kind = t.Kind
	}
	argv, err := t.argv(script)
	if err != nil {
		return 0, err
	}
	req := ExecRequest{Argv: argv, TimeoutSeconds: MaxExecTimeout}
	began := time.Now()
	var res ExecResult
	defer func() {
		tr := Trace{Kind: kind, Request: map[string]any{"path": t.Path, "bytes": n}}
		s.record(ctx, ws, req, tr, began, res, err)
	}()
	op, err := s.opFor(ctx, ws, &req)
	if err != nil {
		return 0, err
	}
	if !t.Anywhere && (script == readScript || script == writeScript) {
		op.File = t.Path
	}
	dctx, cancel := context.WithTimeout(ctx, req.Timeout()+opWait)
	defer cancel()
	opRes, n, err := s.ops.DoData(dctx, op, in, out)
	switch {
	case err != nil && errdefs.Kind(err) != nil:
		return n, err
	case err != nil && dctx.Err() != nil:
		return n, errdefs.Newf(errdefs.ErrTimeout, "%s: %w", t.Path, err)
	case err != nil:
		return n, errdefs.Upstreamf("%s: %v", t.Path, err)
	case opRes.Error != "":
		return n, errdefs.Upstreamf("%s", opRes.Error)
	case opRes.Exec == nil:
		return n, errdefs.Upstreamf("%s: the worker sent no result", t.Path)
	}
	s.settle(ctx, op.Workspace, opRes)
	res = *opRes.Exec
	return n, fileExit(t.Path, res, "")
}

// fileExit is the error a file script's exit stands for (nil for 0).
func fileExit(p string, res ExecResult, tooLarge string) error {
	msg := strings.TrimSpace(res.Stderr)
	switch {
	case res.ExitCode == 0 && !res.TimedOut && res.Signal == "":
		return nil
	case res.TimedOut:
		return errdefs.Newf(errdefs.ErrTimeout, "%s: the transfer was killed after %d s", p, MaxExecTimeout)
	case res.ExitCode == 77:
		return errdefs.Invalidf("path %q leaves the workspace (through a symlink)", p)
	case res.ExitCode == 78:
		return errdefs.NotFoundf("%s: %s", p, msg)
	case res.ExitCode == 79:
		return errdefs.TooLargef("%s is larger than %d bytes%s", p, MaxStreamBytes, tooLarge)
	case res.ExitCode == 80 && msg == "not a directory":
		return errdefs.Newf(errdefs.ErrInvalid, "%s: %w", p, ErrNotDirectory)
	case res.ExitCode == 80:
		return errdefs.Newf(errdefs.ErrInvalid, "%s: %w", p, ErrIsDirectory)
	}
	return errdefs.Newf(errdefs.ErrUpstream, "%w", &CommandError{Path: p, ExitCode: res.ExitCode, Signal: res.Signal, Stderr: msg})
}

// What a transfer's path is, against its wish (errdefs.ErrInvalid too).
var (
	ErrIsDirectory  = errors.New("is a directory")
	ErrNotDirectory = errors.New("not a directory")
)

// CommandError is a transfer whose command in the sandbox failed (cat
// or tar: a read-only or full filesystem, a permission): what it said.
type CommandError struct {
	Path     string
	ExitCode int
	Signal   string
	Stderr   string
}

func (e *CommandError) Error() string {
	how := fmt.Sprintf("exit %d", e.ExitCode)
	if e.Signal != "" {
		how = "killed by " + e.Signal
	}
	return fmt.Sprintf("%s: %s: %s", e.Path, how, e.Stderr)
}

// fileOp runs script (after fileScript) on the workspace's path rel, as
// one operation with a small output (a listing).
func (s *Service) fileOp(ctx context.Context, ws Workspace, kind, rel, script string) (ExecResult, error) {
	if err := checkRelPath(rel); err != nil {
		return ExecResult{}, errdefs.Invalidf("%w", err)
	}
	req := ExecRequest{Argv: []string{"sh", "-c", fileScript + script, "sh", rel}}
	res, err := s.run(ctx, ws, req, Trace{Kind: kind, Request: map[string]any{"path": rel}})
	if err != nil {
		return res, err
	}
	return res, fileExit(rel, res, "")
}

// limitWriter passes at most n bytes to w; more is errdefs.ErrTooLarge.
type limitWriter struct {
	w    io.Writer
	n    int64
	what string
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, errdefs.TooLargef("%s is larger than %d bytes", l.what, l.n)
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}

// limitReader reads at most n bytes of r; more is errdefs.ErrTooLarge.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	if int64(n) > l.n {
		return 0, errdefs.TooLargef("a file or tar sent through the API is at most %d bytes", MaxStreamBytes)
	}
	l.n -= int64(n)
	return n, err
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
func CheckTar(data []byte) error { return checkTar(bytes.NewReader(data)) }

func checkTar(r io.Reader) error {
	tr := tar.NewReader(r)
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
