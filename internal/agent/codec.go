package agent

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// MaxFrameSize is the largest frame payload either side accepts.
const MaxFrameSize = 16 << 20

// Codec errors.
var (
	// ErrFrameTooLarge: a frame's length exceeds MaxFrameSize.
	ErrFrameTooLarge = errors.New("agent frame too large")
	// ErrUnknownType: a frame's "type" names no known message.
	ErrUnknownType = errors.New("unknown agent message type")
)

// ReadFrame reads one frame's payload. It returns io.EOF if the stream ends
// cleanly between frames and an error wrapping io.ErrUnexpectedEOF if it
// ends inside one.
func ReadFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("read frame header: %w", err)
		}
		return nil, err
	}
	return readBody(r, hdr)
}

// readBody reads the payload of the frame whose header is hdr.
func readBody(r io.Reader, hdr [4]byte) ([]byte, error) {
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameSize {
		return nil, fmt.Errorf("read frame of %d bytes: %w", n, ErrFrameTooLarge)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read frame body: %w", err)
	}
	return buf, nil
}

// WriteFrame writes one frame with a single Write call. Callers sharing w
// between goroutines use a Writer instead.
func WriteFrame(w io.Writer, payload []byte) error {
	if len(payload) > MaxFrameSize {
		return fmt.Errorf("write frame of %d bytes: %w", len(payload), ErrFrameTooLarge)
	}
	buf := make([]byte, 4+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(len(payload)))
	copy(buf[4:], payload)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write frame: %w", err)
	}
	return nil
}

// Encode marshals m as a frame payload: m's JSON object with "type" first,
// or, for Output, a binary frame (see binframe.go).
func Encode(m Msg) ([]byte, error) {
	if _, ok := m.(*Output); ok {
		if b, ok := encodeBinary(m); ok {
			return b, nil
		}
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.MessageType(), err)
	}
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("encode %s: not a JSON object", m.MessageType())
	}
	var b bytes.Buffer
	b.Grow(len(body) + 24)
	b.WriteString(`{"type":`)
	typ, _ := json.Marshal(m.MessageType())
	b.Write(typ)
	if len(body) > 2 {
		b.WriteByte(',')
	}
	b.Write(body[1:])
	return b.Bytes(), nil
}

// Decode parses a frame payload into its message (a pointer to one of this
// package's message structs).
func Decode(payload []byte) (Msg, error) {
	if len(payload) > 0 && payload[0] == binaryMark {
		return decodeBinary(payload)
	}
	var env struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(payload, &env); err != nil {
		return nil, fmt.Errorf("decode frame: %w", err)
	}
	var m Msg
	switch env.Type {
	case TypeInit:
		m = new(Init)
	case TypeReady:
		m = new(Ready)
	case TypeFatal:
		m = new(Fatal)
	case TypeExec:
		m = new(Exec)
	case TypeStarted:
		m = new(Started)
	case TypeOutput:
		m = new(Output)
	case TypeMessage:
		m = new(ChannelMessage)
	case TypeStdin:
		m = new(Stdin)
	case TypeSignal:
		m = new(Signal)
	case TypeExit:
		m = new(Exit)
	case TypeWriteFile:
		m = new(WriteFile)
	case TypeShell:
		m = new(Shell)
	case TypeShellResult:
		m = new(ShellResult)
	case TypeResize:
		m = new(Resize)
	default:
		return nil, fmt.Errorf("decode frame type %q: %w", env.Type, ErrUnknownType)
	}
	if err := json.Unmarshal(payload, m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", env.Type, err)
	}
	return m, nil
}

// ReadMsg reads and decodes one message.
func ReadMsg(r io.Reader) (Msg, error) {
	payload, err := ReadFrame(r)
	if err != nil {
		return nil, err
	}
	return Decode(payload)
}

// Writer writes whole frames to a stream shared by many goroutines.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter returns a Writer on w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Send encodes m and writes it as one frame.
func (w *Writer) Send(m Msg) error {
	payload, err := Encode(m)
	if err != nil {
		return err
	}
	return w.WriteFrame(payload)
}

// WriteFrame writes one frame; concurrent calls do not interleave.
func (w *Writer) WriteFrame(payload []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return WriteFrame(w.w, payload)
}
