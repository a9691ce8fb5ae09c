package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/helmr/helmr/internal/errdefs"
	"github.com/helmr/helmr/internal/workspaces"
)

// openTerminal starts an interactive shell on a terminal in a
// workspace's sandbox (201 with the terminal; the shell starts when a
// worker takes it). The size defaults to 80x24.
func (s *Server) openTerminal(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	size := workspaces.TerminalSize{Cols: 80, Rows: 24}
	if r.ContentLength != 0 {
		if err := decodeJSON(w, r, 4<<10, &size); err != nil {
			return err
		}
	}
	t, err := svc.OpenTerminal(r.Context(), ws, size)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, t)
}

// getTerminal describes a terminal.
func (s *Server) getTerminal(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	t, err := svc.GetTerminal(ws, r.PathValue("tid"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, t)
}

// terminalOutput streams what a terminal prints as server-sent events:
// "output" events ({"data": base64 of the bytes}) whose ids are their
// sequence numbers, so that a client resumes with Last-Event-ID (or
// ?after=), then one "end" event with the terminal's final state.
func (s *Server) terminalOutput(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	after, err := afterParam(r)
	if cur := r.Header.Get("Last-Event-ID"); cur != "" {
		after, err = cursorParam(cur)
	}
	if err != nil {
		return err
	}
	if _, err := svc.GetTerminal(ws, r.PathValue("tid")); err != nil {
		return err // before the stream starts: a plain 404
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		return errors.New("streaming unsupported")
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	send := func(chunks []workspaces.TerminalChunk) error {
		for _, c := range chunks {
			if _, err := fmt.Fprintf(w, "id: %d\nevent: output\ndata: {\"data\":%q}\n\n", c.Seq, base64.StdEncoding.EncodeToString(c.Data)); err != nil {
				return err
			}
		}
		flusher.Flush()
		return nil
	}
	keepalive := func() error {
		_, err := fmt.Fprint(w, ": keepalive\n\n")
		flusher.Flush()
		return err
	}
	t, err := svc.TerminalOutput(r.Context(), ws, r.PathValue("tid"), after, send, keepalive)
	if err != nil {
		return nil // the client went away, or the terminal was forgotten: the stream just ends
	}
	data, _ := json.Marshal(t)
	fmt.Fprintf(w, "event: end\ndata: %s\n\n", data)
	flusher.Flush()
	return nil
}

// terminalInput types the request body (bytes) into a terminal (204).
func (s *Server) terminalInput(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, workspaces.MaxTerminalInput))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errdefs.TooLargef("a terminal's input is at most %d bytes a request", workspaces.MaxTerminalInput)
		}
		return errdefs.Invalidf("read the input: %v", err)
	}
	if err := svc.TerminalInput(ws, r.PathValue("tid"), data); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// resizeTerminal sets a terminal's size ({cols, rows}; 204).
func (s *Server) resizeTerminal(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	var size workspaces.TerminalSize
	if err := decodeJSON(w, r, 4<<10, &size); err != nil {
		return err
	}
	if err := svc.ResizeTerminal(ws, r.PathValue("tid"), size); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// closeTerminal ends a terminal, killing its shell (204).
func (s *Server) closeTerminal(w http.ResponseWriter, r *http.Request) error {
	svc, ws, err := s.requestWorkspace(r)
	if err != nil {
		return err
	}
	if err := svc.CloseTerminal(ws, r.PathValue("tid")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
