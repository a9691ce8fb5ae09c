package workspaces

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/helmr/helmr/internal/errdefs"
)

// One direct operation carries at most MaxStdinBytes in and
// MaxOutputBytes out of a sandbox. Files and tars larger than
// that travel in parts: a staging file in the sandbox is filled (or
// drained) by one operation per part, and the command runs once on the
// whole. Parts are base64 text, so any byte offset is a safe cut.

// transferPart is the most bytes of stdin or output one part carries.
const transferPart = 512 << 10

// ExecStdin is Exec for a stdin of any size (the caller bounds it): a
// stdin larger than one operation takes is first written, in parts, to a
// staging file in the workspace (a hidden .helmr-upload-… name; it counts
// against the quota like the data it becomes), and the command then runs
// with that file as its standard input, unlinked before the command
// starts. The trajectory records the command once, as tr says; the parts
// are not recorded.
func (s *Service) ExecStdin(ctx context.Context, ws Workspace, req ExecRequest, tr Trace) (ExecResult, error) {
	if err := req.validate(); err != nil {
		return ExecResult{}, err
	}
	if len(req.Stdin) <= MaxStdinBytes {
		return s.run(ctx, ws, req, tr)
	}
	began := time.Now()
	stage := ".helmr-upload-" + randomHex(8)
	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = s.run(cctx, ws, ExecRequest{Argv: []string{"rm", "-f", "--", stage}}, Trace{quiet: true})
	}
	dir := "" // the workspace's directory in the sandbox
	for rest := req.Stdin; rest != ""; {
		part := cutPart(rest, transferPart)
		rest = rest[len(part):]
		res, err := s.run(ctx, ws, ExecRequest{Argv: []string{"sh", "-c", `cat >> "$1" && pwd -P`, "sh", stage}, Stdin: part}, Trace{quiet: true})
		if err == nil && res.ExitCode != 0 {
			err = errdefs.Upstreamf("stage the input in the workspace: %s", strings.TrimSpace(res.Stderr))
		}
		if dir == "" && err == nil {
			if dir = strings.TrimSpace(res.Stdout); !stagedPath.MatchString(dir) {
				err = errdefs.Upstreamf("stage the input in the workspace: it is at %q", res.Stdout)
			}
		}
		if err != nil {
			cleanup()
			s.record(ctx, ws, req, tr, began, res, err)
			return ExecResult{}, err
		}
		if ws, err = s.pinHost(ctx, ws); err != nil {
			cleanup()
			return ExecResult{}, err
		}
	}
	run := req
	run.Stdin = ""
	argv := req.Argv
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-c", req.Command}
		run.Command = ""
	}
	run.Argv = append([]string{"sh", "-c", `exec <"$0" || exit 74; rm -f -- "$0"; exec "$@"`, dir + "/" + stage}, argv...)
	if tr.Request == nil {
		tr.Request = traceRequest(req) // the caller's, not the staging
	}
	res, err := s.run(ctx, ws, run, tr)
	if err != nil {
		cleanup()
	}
	return res, err
}

// pinHost returns ws with its host, once a first operation gave it one,
// so that the next parts go to the same worker.
func (s *Service) pinHost(ctx context.Context, ws Workspace) (Workspace, error) {
	if ws.Host != "" {
		return ws, nil
	}
	return s.store.GetWorkspace(ctx, ws.ID)
}

// cutPart returns the first at most n bytes of s, not splitting a UTF-8
// sequence (base64 text never has one; a caller's stdin may).
func cutPart(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// stagedPath matches what mktemp prints in a sandbox.
var stagedPath = regexp.MustCompile(`^/[A-Za-z0-9._/-]+$`)

// ExecOutput is Exec for a command printing up to max bytes of ASCII
// (base64) on its standard output: output larger than one operation
// carries is read again in parts: the command runs once more with its
// output into a temporary file in the sandbox (mktemp), which is then
// read back in parts and removed. The command must be safe to run twice.
// Output beyond max is a 413 saying tooLarge. The trajectory records the
// command once, as tr says.
func (s *Service) ExecOutput(ctx context.Context, ws Workspace, req ExecRequest, tr Trace, max int, tooLarge string) (res ExecResult, err error) {
	if err := req.Validate(); err != nil {
		return ExecResult{}, err
	}
	began := time.Now()
	quiet := tr
	quiet.quiet = true
	defer func() { s.record(ctx, ws, req, tr, began, res, err) }()
	if res, err = s.run(ctx, ws, req, quiet); err != nil || !res.StdoutTruncated || res.ExitCode != 0 {
		return res, err
	}
	if ws, err = s.pinHost(ctx, ws); err != nil {
		return res, err
	}
	staged := req
	argv := req.Argv
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-c", req.Command}
		staged.Command = ""
	}
	staged.Argv = append([]string{"sh", "-c", `t=$(mktemp) || exit 75
"$@" >"$t"; rc=$?
[ $rc -eq 0 ] || { rm -f -- "$t"; exit $rc; }
echo "$(wc -c <"$t") $t"`, "sh"}, argv...)
	first, err := s.run(ctx, ws, staged, quiet)
	if err != nil || first.ExitCode != 0 {
		return first, err
	}
	sizeStr, tmp, _ := strings.Cut(strings.TrimSpace(first.Stdout), " ")
	size, perr := strconv.Atoi(sizeStr)
	if perr != nil || !stagedPath.MatchString(tmp) || strings.Contains(tmp, "..") {
		return res, errdefs.Upstreamf("staging the output gave %q", first.Stdout)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = s.run(cctx, ws, ExecRequest{Argv: []string{"rm", "-f", "--", tmp}}, Trace{quiet: true})
	}()
	if size > max {
		return res, errdefs.TooLargef("%s", tooLarge)
	}
	var out strings.Builder
	out.Grow(size)
	for off := 0; off < size; off += transferPart {
		part, err := s.run(ctx, ws, ExecRequest{Argv: []string{"sh", "-c", `tail -c +$(($2 + 1)) -- "$1" | head -c "$3"`, "sh", tmp, strconv.Itoa(off), strconv.Itoa(transferPart)}}, Trace{quiet: true})
		if err == nil && (part.ExitCode != 0 || part.StdoutTruncated) {
			err = errdefs.Upstreamf("read back the output at %d: exit %d: %s", off, part.ExitCode, strings.TrimSpace(part.Stderr))
		}
		if err != nil {
			return res, err
		}
		out.WriteString(part.Stdout)
	}
	if out.Len() != size {
		return res, errdefs.Upstreamf("read back %d of %d bytes of output", out.Len(), size)
	}
	res.Stdout, res.StdoutTruncated = out.String(), false
	res.Stderr = first.Stderr
	return res, nil
}

// randomHex returns n random bytes as hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
