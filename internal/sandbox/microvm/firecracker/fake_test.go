package firecracker

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeAPI is a hand-written stand-in for Firecracker's API server, for
// unit tests of the client only: it records what it is sent, answers as
// Firecracker's document says (204 to a PUT or PATCH, InstanceInfo to
// GET /), refuses configuration once started as Firecracker does, and
// refuses the paths in fail with a fault_message. It proves nothing about
// Firecracker itself.
type fakeAPI struct {
	t    *testing.T
	sock string

	mu    sync.Mutex
	calls []call
	state string
	fail  map[string]string // "METHOD /path" → fault message
}

// call is one recorded request.
type call struct {
	Method, Path string
	Body         []byte
}

func (c call) key() string { return c.Method + " " + c.Path }

// newFakeAPI serves the fake on a unix socket in a temporary directory.
func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	f := &fakeAPI{t: t, sock: filepath.Join(t.TempDir(), "api.sock"), state: InstanceNotStarted, fail: map[string]string{}}
	ln, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	c := call{Method: r.Method, Path: r.URL.Path, Body: body}
	f.calls = append(f.calls, c)
	fault := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(apiError{FaultMessage: msg})
	}
	if msg, ok := f.fail[c.key()]; ok {
		fault(http.StatusBadRequest, msg)
		return
	}
	if r.Method != http.MethodGet && r.Header.Get("Content-Type") != "application/json" {
		fault(http.StatusBadRequest, "fake: want Content-Type application/json")
		return
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(InstanceInfo{AppName: "Firecracker", ID: "fake", State: f.state, VMMVersion: "0.0.0-fake"})
		return
	case r.URL.Path == "/actions" && strings.Contains(string(body), ActionInstanceStart):
		f.state = InstanceRunning
	case r.URL.Path == "/vm" && strings.Contains(string(body), StatePaused):
		f.state = InstancePaused
	case r.URL.Path == "/vm" && strings.Contains(string(body), StateResumed):
		f.state = InstanceRunning
	case r.URL.Path == "/snapshot/load":
		f.state = InstancePaused
		if strings.Contains(string(body), `"resume_vm":true`) {
			f.state = InstanceRunning
		}
	case f.state != InstanceNotStarted && preBootOnly(r.URL.Path):
		fault(http.StatusBadRequest, "The requested operation is not supported after starting the microVM.")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// preBootOnly: the document's "Pre-boot only" paths.
func preBootOnly(path string) bool {
	for _, p := range []string{"/boot-source", "/drives/", "/machine-config", "/network-interfaces/", "/vsock", "/logger"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

func (f *fakeAPI) recorded() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}
