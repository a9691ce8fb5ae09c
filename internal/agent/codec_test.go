package agent

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRoundTrip(t *testing.T) {
	msgs := []Msg{
		&Init{StateDir: "/proc/self/fd/5", RootLayers: []string{"/a", "/b"}, Workspace: "/workspace",
			WorkspaceSource: "/proc/self/fd/6", Hostname: "helmr-sandbox", DNS: []string{"1.1.1.1"}, CloseFDs: []int{5, 6}},
		&Ready{Version: Version},
		&Fatal{Message: "mount proc: operation not permitted"},
		&Exec{ID: 7, Argv: []string{"node", "-e", "1"}, Env: []string{"A=b"}, Cwd: "/workspace", UID: 1000, GID: 1000, Channel: true, Stdin: true},
		&Started{ID: 7, PID: 12},
		&Output{ID: 7, Stream: Stdout, Data: []byte{0, 1, 2, 0xff, '\n'}},
		&ChannelMessage{ID: 7, Data: []byte(`{"a":1}`)},
		&Stdin{ID: 7, Data: []byte("x")},
		&Stdin{ID: 7, EOF: true},
		&Signal{ID: 7, Signal: "SIGTERM"},
		&Exit{ID: 7, Code: 137, Signal: "killed"},
		&Exit{ID: 8, Code: 127, Error: `exec "nope": not found`},
		&Shell{ID: 9, Op: "open", Name: "default", Env: []string{"PATH=/bin"}, Cwd: "/workspace", UID: 1000, GID: 1000,
			StartupSource: []string{"/root/.bashrc"}},
		&Shell{ID: 10, Op: "run", Name: "default", Command: "cat <<EOF\nx\nEOF", Timeout: 1500000000, MaxOutput: 1 << 20},
		&Shell{ID: 11, Op: "interrupt", Name: "default", Timeout: 200000000, Retries: 3},
		&ShellResult{ID: 10, Output: []byte{'a', '\n', 0xff}, OutputCut: 7, ExitCode: 1, TimedOut: true},
		&ShellResult{ID: 12, ExitCode: 2, SyntaxError: true, SyntaxStderr: "bash: line 1: syntax error"},
		&ShellResult{ID: 13, ExitCode: 3, Exited: true},
		&ShellResult{ID: 14, Error: "no shell session x", ErrorCode: ShellNoSession},
	}
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, m := range msgs {
		if err := w.Send(m); err != nil {
			t.Fatalf("Send(%T) = %v", m, err)
		}
	}
	for _, want := range msgs {
		got, err := ReadMsg(&buf)
		if err != nil {
			t.Fatalf("ReadMsg() = %v, want %T", err, want)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("round trip %s (-want +got):\n%s", want.MessageType(), diff)
		}
	}
	if _, err := ReadFrame(&buf); err != io.EOF {
		t.Errorf("ReadFrame(empty) = %v, want io.EOF", err)
	}
}

func TestEncodeTypeField(t *testing.T) {
	got, err := Encode(&Ready{Version: "v"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"ready","version":"v"}`; string(got) != want {
		t.Errorf("Encode(Ready) = %s, want %s", got, want)
	}
}

func TestOversizeFrame(t *testing.T) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], MaxFrameSize+1)
	_, err := ReadFrame(bytes.NewReader(hdr[:]))
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("ReadFrame(oversize header) = %v, want ErrFrameTooLarge", err)
	}
	err = WriteFrame(io.Discard, make([]byte, MaxFrameSize+1))
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Errorf("WriteFrame(oversize) = %v, want ErrFrameTooLarge", err)
	}
	if err := WriteFrame(io.Discard, make([]byte, MaxFrameSize)); err != nil {
		t.Errorf("WriteFrame(MaxFrameSize) = %v, want nil", err)
	}
}

func TestTruncatedFrame(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, []byte(`{"type":"ready","version":"x"}`)); err != nil {
		t.Fatal(err)
	}
	full := buf.Bytes()
	for _, n := range []int{2, 4, 10, len(full) - 1} {
		_, err := ReadFrame(bytes.NewReader(full[:n]))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("ReadFrame(first %d of %d bytes) = %v, want io.ErrUnexpectedEOF", n, len(full), err)
		}
	}
}

func TestDecodeUnknownType(t *testing.T) {
	_, err := Decode([]byte(`{"type":"bogus"}`))
	if !errors.Is(err, ErrUnknownType) {
		t.Errorf("Decode(bogus) = %v, want ErrUnknownType", err)
	}
}
