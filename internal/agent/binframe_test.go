package agent

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBinaryFrames: stdin and output round-trip as binary frames, raw
// bytes intact; Output is always sent so, Stdin only as asked; a frame
// too short or of an unknown kind is an error.
func TestBinaryFrames(t *testing.T) {
	raw := []byte{0, 0xff, '\n', '{', 0x80}
	for _, m := range []Msg{
		&Stdin{ID: 7, Data: raw},
		&Stdin{ID: 1<<63 + 5, EOF: true},
		&Output{ID: 9, Stream: Stdout, Data: raw},
		&Output{ID: 9, Stream: Stderr, Data: []byte("e")},
	} {
		b, ok := encodeBinary(m)
		if !ok || b[0] != binaryMark {
			t.Fatalf("encodeBinary(%T) = %v", m, ok)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(binary %T) = %v", m, err)
		}
		if diff := cmp.Diff(m, got, cmp.Transformer("nilEmpty", func(b []byte) string { return string(b) })); diff != "" {
			t.Errorf("round trip of %T (-sent +got):\n%s", m, diff)
		}
	}
	if b, _ := Encode(&Output{ID: 1, Stream: Stdout, Data: raw}); b[0] != binaryMark {
		t.Errorf("Encode(Output) = %q..., want a binary frame", b[:1])
	}
	if b, _ := Encode(&Stdin{ID: 1, Data: raw}); b[0] != '{' {
		t.Errorf("Encode(Stdin) = %q..., want JSON (binary only for an agent that reads it)", b[:1])
	}
	for _, bad := range [][]byte{{binaryMark, binStdin, 0}, append([]byte{binaryMark, 9}, make([]byte, 9)...)} {
		if _, err := Decode(bad); err == nil {
			t.Errorf("Decode(%v) = nil error", bad)
		}
	}
	// A client whose agent said it reads binary stdin sends it so.
	var buf bytes.Buffer
	c := &Client{w: NewWriter(&buf)}
	c.sendStdin(&Stdin{ID: 3, Data: []byte("x")})
	c.binary.Store(true)
	c.sendStdin(&Stdin{ID: 3, Data: []byte("x")})
	first, _ := ReadFrame(&buf)
	second, _ := ReadFrame(&buf)
	if first[0] != '{' || second[0] != binaryMark {
		t.Errorf("stdin frames before and after a binary ready: %q, %q", first[:1], second[:1])
	}
}
