package envdpb_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/helmr/helmr/internal/e2b/envdpb/processpb"
	"github.com/helmr/helmr/internal/e2b/envdpb/processpb/processpbconnect"
)

// startServer answers Start the way envd does: a start event with the pid,
// the output, then an end event with the exit code. It records the request.
type startServer struct {
	processpbconnect.UnimplementedProcessHandler
	got *processpb.StartRequest
}

func (s *startServer) Start(_ context.Context, req *connect.Request[processpb.StartRequest], stream *connect.ServerStream[processpb.StartResponse]) error {
	s.got = req.Msg
	for _, ev := range startEvents() {
		if err := stream.Send(&processpb.StartResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

func startEvents() []*processpb.ProcessEvent {
	return []*processpb.ProcessEvent{
		{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 42}}},
		{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("hello\n")}}}},
		{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stderr{Stderr: []byte{0xff, 0x00, 'x'}}}}},
		{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: -2, Exited: true, Status: "exit status 254"}}},
	}
}

func newStartServer(t *testing.T) (*startServer, *httptest.Server) {
	t.Helper()
	s := &startServer{}
	mux := http.NewServeMux()
	mux.Handle(processpbconnect.NewProcessHandler(s))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return s, srv
}

// TestStartStreamsOverConnectJSON drives Start through a generated Connect
// client using the JSON codec, as the SDKs do, and checks every event.
func TestStartStreamsOverConnectJSON(t *testing.T) {
	s, srv := newStartServer(t)
	client := processpbconnect.NewProcessClient(srv.Client(), srv.URL, connect.WithProtoJSON())
	cwd, tag := "/home/user", "job-1"
	req := &processpb.StartRequest{
		Process: &processpb.ProcessConfig{
			Cmd:  "/bin/bash",
			Args: []string{"-l", "-c", "echo hello"},
			Envs: map[string]string{"A": "1"},
			Cwd:  &cwd,
		},
		Tag: &tag,
	}
	stream, err := client.Start(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var got []*processpb.ProcessEvent
	for stream.Receive() {
		got = append(got, stream.Msg().GetEvent())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("Start stream: %v", err)
	}
	if err := stream.Close(); err != nil {
		t.Fatalf("close Start stream: %v", err)
	}
	if diff := cmp.Diff(startEvents(), got, protocmp.Transform()); diff != "" {
		t.Errorf("Start events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(req, s.got, protocmp.Transform()); diff != "" {
		t.Errorf("server got request (-sent +got):\n%s", diff)
	}
}

// TestStartWireFormat speaks the Connect streaming protocol by hand, as a
// client that is not Go would: a JSON request in one 5-byte envelope, and an
// answer of enveloped JSON messages (bytes as base64, lowerCamelCase names)
// closed by an end-of-stream envelope (flag 0x02).
func TestStartWireFormat(t *testing.T) {
	s, srv := newStartServer(t)
	body := `{"process":{"cmd":"/bin/bash","args":["-l","-c","ls"],"envs":{"A":"1"}},"stdin":false}`
	resp, err := http.Post(srv.URL+processpbconnect.ProcessStartProcedure, "application/connect+json",
		bytes.NewReader(envelope(0, []byte(body))))
	if err != nil {
		t.Fatalf("POST Start: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST Start status = %d, want 200", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/connect+json" {
		t.Errorf("Content-Type = %q, want application/connect+json", ct)
	}
	if s.got.GetProcess().GetCmd() != "/bin/bash" || s.got.Stdin == nil || s.got.GetStdin() {
		t.Errorf("server got %v, want cmd /bin/bash and stdin set to false", s.got)
	}

	frames := readEnvelopes(t, resp.Body)
	want := []string{
		`{"event":{"start":{"pid":42}}}`,
		`{"event":{"data":{"stdout":"aGVsbG8K"}}}`,
		`{"event":{"data":{"stderr":"/wB4"}}}`,
		`{"event":{"end":{"exitCode":-2,"exited":true,"status":"exit status 254"}}}`,
	}
	if len(frames) != len(want)+1 {
		t.Fatalf("got %d envelopes, want %d messages and an end of stream", len(frames), len(want))
	}
	for i, w := range want {
		if frames[i].flags != 0 {
			t.Errorf("envelope %d flags = %#x, want 0", i, frames[i].flags)
		}
		if g := compactJSON(t, frames[i].data); g != w {
			t.Errorf("envelope %d = %s, want %s", i, g, w)
		}
		// The same bytes decode as the SDK's message type.
		var ev processpb.StartResponse
		if err := protojson.Unmarshal(frames[i].data, &ev); err != nil {
			t.Errorf("envelope %d: decode StartResponse: %v", i, err)
		}
	}
	end := frames[len(frames)-1]
	if end.flags != 0x02 {
		t.Errorf("last envelope flags = %#x, want 0x02 (end of stream)", end.flags)
	}
	var trailer map[string]json.RawMessage
	if err := json.Unmarshal(end.data, &trailer); err != nil {
		t.Fatalf("end-of-stream message %q: %v", end.data, err)
	}
	if _, failed := trailer["error"]; failed {
		t.Errorf("end-of-stream message carries an error: %s", end.data)
	}
}

// TestUnimplementedIsConnectError checks that an RPC without a handler fails
// with Connect's unimplemented code, which the SDKs map to their own errors.
func TestUnimplementedIsConnectError(t *testing.T) {
	_, srv := newStartServer(t)
	client := processpbconnect.NewProcessClient(srv.Client(), srv.URL, connect.WithProtoJSON())
	_, err := client.List(context.Background(), connect.NewRequest(&processpb.ListRequest{}))
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != connect.CodeUnimplemented {
		t.Errorf("List error = %v, want a connect error with code unimplemented", err)
	}
}

type frame struct {
	flags byte
	data  []byte
}

func envelope(flags byte, data []byte) []byte {
	out := make([]byte, 5, 5+len(data))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(data)))
	return append(out, data...)
}

func readEnvelopes(t *testing.T, r io.Reader) []frame {
	t.Helper()
	var frames []frame
	for {
		var head [5]byte
		if _, err := io.ReadFull(r, head[:]); err == io.EOF {
			return frames
		} else if err != nil {
			t.Fatalf("read envelope header: %v", err)
		}
		data := make([]byte, binary.BigEndian.Uint32(head[1:]))
		if _, err := io.ReadFull(r, data); err != nil {
			t.Fatalf("read envelope of %d bytes: %v", len(data), err)
		}
		frames = append(frames, frame{flags: head[0], data: data})
	}
}

func compactJSON(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		t.Fatalf("not JSON: %q: %v", b, err)
	}
	return strings.TrimSpace(buf.String())
}
