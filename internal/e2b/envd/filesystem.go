package envd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/helmr/helmr/internal/e2b/envdpb/filesystempb"
	"github.com/helmr/helmr/internal/e2b/envdpb/filesystempb/filesystempbconnect"
	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// Filesystem calls run as scripts in the workspace's sandbox (one exec
// each), as Helmr's own file operations do: fsScript resolves each
// workspace-relative path against the workspace (the directory execs
// start in), symlinks included, and exits 77 for one that leaves it; 78
// is "not there", 80 "not a directory", 81 "already there". Entries are
// printed by find -printf in entryFormat, NUL-terminated.
const fsScript = `ws=$(pwd -P)
at() { r=$(realpath -m -- "$ws/$1") || exit 76
case "$r" in "$ws"|"$ws"/*) ;; *) echo "the path leaves the workspace" >&2; exit 77;; esac
printf '%s' "$ws/$1"; }
there() { [ -e "$1" ] || [ -L "$1" ] || { echo "no such file or directory" >&2; exit 78; }; }
F='%y\t%Y\t%s\t%m\t%M\t%u\t%g\t%T@\t%l\t%P\0'
`

// Scripts of the calls, after fsScript.
const (
	statScript = `p=$(at "$1") || exit $?; there "$p"; find "$p" -maxdepth 0 -printf "$F"`
	listScript = `p=$(at "$1") || exit $?; there "$p"
[ -d "$p" ] || { echo "not a directory" >&2; exit 80; }
find "$p" -mindepth 1 -maxdepth "$2" -printf "$F" | head -c ` + "1047552"  // workspaces.MaxOutputBytes - 1 KiB: whole entries or a cut last one
	mkdirScript = `p=$(at "$1") || exit $?
if [ -e "$p" ] || [ -L "$p" ]; then echo "already exists" >&2; exit 81; fi
mkdir -p -- "$p" && find "$p" -maxdepth 0 -printf "$F"`
	moveScript = `s=$(at "$1") || exit $?; d=$(at "$2") || exit $?; there "$s"
mkdir -p -- "$(dirname -- "$d")" && mv -T -- "$s" "$d" && find "$d" -maxdepth 0 -printf "$F"`
	removeScript = `p=$(at "$1") || exit $?; there "$p"; rm -rf -- "$p"`
)

// errAlreadyExists marks MakeDir's path being there (already_exists).
var errAlreadyExists = errors.New("already exists")

// fsOp runs script on workspace-relative paths args (then extra
// arguments), recorded as kind.
func (a *api) fsOp(ctx context.Context, ws workspaces.Workspace, kind, script string, rec map[string]any, args ...string) (string, error) {
	req := workspaces.ExecRequest{Argv: append([]string{"sh", "-c", fsScript + script, "sh"}, args...)}
	res, err := a.cfg.Workspaces.Exec(ctx, ws, req, workspaces.Trace{Kind: kind, Request: rec})
	if err != nil {
		return "", err
	}
	msg := strings.TrimSpace(res.Stderr)
	switch {
	case res.ExitCode == 0 && !res.TimedOut && res.Signal == "":
		return res.Stdout, nil
	case res.TimedOut:
		return "", errdefs.Newf(errdefs.ErrTimeout, "%s: timed out", args[0])
	case res.ExitCode == 77:
		return "", errdefs.Invalidf("path %q leaves the workspace (through a symlink)", args[0])
	case res.ExitCode == 78:
		return "", errdefs.NotFoundf("%s: %s", args[0], msg)
	case res.ExitCode == 80:
		return "", errdefs.Invalidf("%s: %s", args[0], msg)
	case res.ExitCode == 81:
		return "", errdefs.Newf(errdefs.ErrConflict, "%s: %w", args[0], errAlreadyExists)
	}
	return "", errdefs.Upstreamf("%s: exit %d: %s", args[0], res.ExitCode, msg)
}

// entries parses find's records; base is the workspace-relative path of
// what find started at, dir whether %P names entries below it (a
// listing) rather than it.
func (a *api) entries(out, base string, listing bool) []*filesystempb.EntryInfo {
	var list []*filesystempb.EntryInfo
	for _, rec := range strings.Split(out, "\x00") {
		f := strings.SplitN(rec, "\t", 10)
		if len(f) != 10 {
			continue // the end, or a record cut by the listing's bound
		}
		rel := base
		if listing {
			rel = path.Join(base, f[9])
		}
		e := &filesystempb.EntryInfo{Name: path.Base(a.abs(rel)), Path: a.abs(rel), Permissions: f[4], Owner: f[5], Group: f[6]}
		e.Size, _ = strconv.ParseInt(f[2], 10, 64)
		mode, _ := strconv.ParseUint(f[3], 8, 32)
		e.Mode = uint32(mode)
		typ := f[1] // of what a symlink leads to
		if f[0] == "l" {
			e.IsSymlink = true
			target := f[8]
			e.SymlinkTarget = &target
		} else {
			typ = f[0]
		}
		switch typ {
		case "f":
			e.Type = filesystempb.FileType_FILE_TYPE_FILE
		case "d":
			e.Type = filesystempb.FileType_FILE_TYPE_DIRECTORY
		case "l", "N", "L": // a dangling or looping symlink
			e.Type = filesystempb.FileType_FILE_TYPE_SYMLINK
		}
		if secs, err := strconv.ParseFloat(f[7], 64); err == nil {
			e.ModifiedTime = timestamppb.New(time.Unix(0, int64(secs*1e9)))
		}
		list = append(list, e)
	}
	return list
}

// filesystemAPI is filesystem.Filesystem.
type filesystemAPI struct {
	a                                                  *api
	filesystempbconnect.UnimplementedFilesystemHandler // watches
}

var _ filesystempbconnect.FilesystemHandler = (*filesystemAPI)(nil)

// target resolves a call's sandbox and path.
func (s *filesystemAPI) target(ctx context.Context, h http.Header, p string) (workspaces.Workspace, string, error) {
	ws, err := s.a.workspace(ctx, h)
	if err != nil {
		return ws, "", err
	}
	rel, err := s.a.rel(p)
	return ws, rel, err
}

func (s *filesystemAPI) Stat(ctx context.Context, req *connect.Request[filesystempb.StatRequest]) (*connect.Response[filesystempb.StatResponse], error) {
	ws, rel, err := s.target(ctx, req.Header(), req.Msg.Path)
	if err != nil {
		return nil, connectError(err)
	}
	out, err := s.a.fsOp(ctx, ws, "e2b.filesystem.stat", statScript, map[string]any{"path": rel}, rel)
	if err != nil {
		return nil, connectError(err)
	}
	es := s.a.entries(out, rel, false)
	if len(es) != 1 {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("stat %s: the sandbox answered %d entries", rel, len(es)))
	}
	return connect.NewResponse(&filesystempb.StatResponse{Entry: es[0]}), nil
}

// maxDepth bounds a listing's depth.
const maxDepth = 64

func (s *filesystemAPI) ListDir(ctx context.Context, req *connect.Request[filesystempb.ListDirRequest]) (*connect.Response[filesystempb.ListDirResponse], error) {
	ws, rel, err := s.target(ctx, req.Header(), req.Msg.Path)
	if err != nil {
		return nil, connectError(err)
	}
	depth := min(max(req.Msg.Depth, 1), maxDepth)
	out, err := s.a.fsOp(ctx, ws, "e2b.filesystem.list", listScript, map[string]any{"path": rel, "depth": depth}, rel, strconv.Itoa(int(depth)))
	if err != nil {
		return nil, connectError(err)
	}
	es := s.a.entries(out, rel, true)
	if es == nil {
		es = []*filesystempb.EntryInfo{}
	}
	return connect.NewResponse(&filesystempb.ListDirResponse{Entries: es}), nil
}

func (s *filesystemAPI) MakeDir(ctx context.Context, req *connect.Request[filesystempb.MakeDirRequest]) (*connect.Response[filesystempb.MakeDirResponse], error) {
	ws, rel, err := s.target(ctx, req.Header(), req.Msg.Path)
	if err != nil {
		return nil, connectError(err)
	}
	out, err := s.a.fsOp(ctx, ws, "e2b.filesystem.make_dir", mkdirScript, map[string]any{"path": rel}, rel)
	if err != nil {
		return nil, connectError(err)
	}
	es := s.a.entries(out, rel, false)
	if len(es) != 1 {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("make %s: the sandbox answered %d entries", rel, len(es)))
	}
	return connect.NewResponse(&filesystempb.MakeDirResponse{Entry: es[0]}), nil
}

func (s *filesystemAPI) Move(ctx context.Context, req *connect.Request[filesystempb.MoveRequest]) (*connect.Response[filesystempb.MoveResponse], error) {
	ws, src, err := s.target(ctx, req.Header(), req.Msg.Source)
	if err != nil {
		return nil, connectError(err)
	}
	dst, err := s.a.rel(req.Msg.Destination)
	if err != nil {
		return nil, connectError(err)
	}
	if src == "." || dst == "." {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the workspace itself cannot be moved, nor replaced"))
	}
	out, err := s.a.fsOp(ctx, ws, "e2b.filesystem.move", moveScript, map[string]any{"source": src, "destination": dst}, src, dst)
	if err != nil {
		return nil, connectError(err)
	}
	es := s.a.entries(out, dst, false)
	if len(es) != 1 {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("move to %s: the sandbox answered %d entries", dst, len(es)))
	}
	return connect.NewResponse(&filesystempb.MoveResponse{Entry: es[0]}), nil
}

func (s *filesystemAPI) Remove(ctx context.Context, req *connect.Request[filesystempb.RemoveRequest]) (*connect.Response[filesystempb.RemoveResponse], error) {
	ws, rel, err := s.target(ctx, req.Header(), req.Msg.Path)
	if err != nil {
		return nil, connectError(err)
	}
	if rel == "." {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the workspace itself cannot be removed"))
	}
	if _, err := s.a.fsOp(ctx, ws, "e2b.filesystem.remove", removeScript, map[string]any{"path": rel}, rel); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&filesystempb.RemoveResponse{}), nil
}
