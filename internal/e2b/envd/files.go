package envd

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// download answers GET /files?path=: the file's bytes, streamed from the
// sandbox (workspaces.Service.ReadFile).
func (a *api) download(w http.ResponseWriter, r *http.Request) {
	ws, err := a.workspace(r.Context(), r.Header)
	if err != nil {
		writeError(w, restStatus(err), err)
		return
	}
	rel, err := a.rel(r.URL.Query().Get("path"))
	if err != nil {
		writeError(w, restStatus(err), err)
		return
	}
	lw := &lazyWriter{w: w, name: path.Base(a.abs(rel))}
	_, err = a.cfg.Workspaces.ReadFile(r.Context(), ws, workspaces.Transfer{Path: rel, Kind: "e2b.files.read"}, lw)
	switch {
	case err != nil && !lw.started:
		writeError(w, restStatus(err), err)
	case err != nil:
		// The status went out with the first bytes: a cut body is all
		// that is left to say it.
		a.log.Warn("e2b download cut", "workspace_id", ws.ID, "path", rel, "err", err)
		panic(http.ErrAbortHandler)
	case !lw.started:
		lw.start()
	}
}

// lazyWriter sends the headers with the first bytes, so that an error
// before any can still be a status.
type lazyWriter struct {
	w       http.ResponseWriter
	name    string
	started bool
}

func (l *lazyWriter) start() {
	l.started = true
	l.w.Header().Set("Content-Type", "application/octet-stream")
	l.w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": l.name}))
	l.w.WriteHeader(http.StatusOK)
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.start()
	}
	return l.w.Write(p)
}

// entryInfo is what an upload answers per file.
type entryInfo struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

// upload answers POST /files: multipart/form-data, one part per file
// (the part's file name is its path, or the path query parameter names
// the one file), or the one file's bytes (application/octet-stream, any
// other type), gzip-encoded or not.
func (a *api) upload(w http.ResponseWriter, r *http.Request) {
	ws, err := a.workspace(r.Context(), r.Header)
	if err != nil {
		writeError(w, restStatus(err), err)
		return
	}
	body := io.Reader(r.Body)
	if strings.EqualFold(r.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, errdefs.Invalidf("the body is not gzip: %v", err))
			return
		}
		defer zr.Close()
		body = zr
	}
	query := r.URL.Query().Get("path")
	write := func(p string, data io.Reader) (entryInfo, error) {
		rel, err := a.rel(p)
		if err != nil {
			return entryInfo{}, err
		}
		if rel == "." {
			return entryInfo{}, errdefs.Invalidf("path %q is the workspace itself, a directory", p)
		}
		if _, err := a.cfg.Workspaces.WriteFile(r.Context(), ws, workspaces.Transfer{Path: rel, Kind: "e2b.files.write"}, data); err != nil {
			return entryInfo{}, err
		}
		return entryInfo{Name: path.Base(rel), Type: "file", Path: a.abs(rel)}, nil
	}
	written := []entryInfo{}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		e, err := write(query, body)
		if err != nil {
			writeError(w, restStatus(err), err)
			return
		}
		written = append(written, e)
	} else {
		mr := multipart.NewReader(body, params["boundary"])
		for n := 0; ; n++ {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				writeError(w, http.StatusBadRequest, errdefs.Invalidf("read the form: %v", err))
				return
			}
			// Part.FileName keeps only the base name: the SDKs send
			// the whole path there.
			_, disp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			name, ok := disp["filename"]
			if !ok {
				part.Close()
				continue // not a file
			}
			if query != "" {
				if n > 0 {
					writeError(w, http.StatusBadRequest, errdefs.Invalidf("the path query parameter names one file: send one part, or the paths as the parts' file names"))
					return
				}
				name = query
			}
			e, err := write(name, part)
			part.Close()
			if err != nil {
				writeError(w, restStatus(err), err)
				return
			}
			written = append(written, e)
		}
		if len(written) == 0 {
			writeError(w, http.StatusBadRequest, errdefs.Invalidf("the form holds no file"))
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(written)
}
