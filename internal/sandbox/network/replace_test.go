package network

import (
	"bytes"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/helmr/helmr/internal/redact"
)

func TestReplaceReader(t *testing.T) {
	rep := newReplacer([]rule{
		{from: []byte("PLACEHOLDER"), to: []byte("value")},
		{from: []byte("PLACE"), to: []byte("spot")},
		{from: []byte("abcabc"), to: []byte("ABCABC")},
	})
	in := "xxPLACEHOLDERyyPLACEzzPLACEHOLDabcabcabcPLACEHOLDER"
	want := "xxvalueyyspotzzspotHOLDABCABCabcvalue"
	if got := rep.replaceString(in); got != want {
		t.Fatalf("replaceString(%q) = %q, want %q", in, got, want)
	}
	// The same through a stream read a byte at a time, and through
	// reads of every size, so that occurrences straddle read boundaries.
	for _, r := range []io.Reader{
		iotest.OneByteReader(strings.NewReader(in)),
		iotest.HalfReader(strings.NewReader(in)),
		strings.NewReader(in),
	} {
		got, err := io.ReadAll(newReplaceReader(rep, r))
		if err != nil || string(got) != want {
			t.Errorf("stream = %q, %v; want %q", got, err, want)
		}
	}
	// A long random stream with planted occurrences, read in odd sizes.
	rnd := rand.New(rand.NewPCG(1, 2))
	var src, exp bytes.Buffer
	for range 20000 {
		chunk := make([]byte, rnd.IntN(200))
		for i := range chunk {
			chunk[i] = byte('a' + rnd.IntN(3)) // many near-misses of abcabc
		}
		src.Write(chunk)
		exp.WriteString(rep.replaceString(string(chunk)))
		src.WriteString("|PLACEHOLDER|")
		exp.WriteString("|value|")
	}
	got, err := io.ReadAll(iotest.HalfReader(newReplaceReader(rep, iotest.HalfReader(bytes.NewReader(src.Bytes())))))
	if err != nil || !bytes.Equal(got, exp.Bytes()) {
		t.Errorf("long stream: %d bytes, %v; want %d bytes equal to replacing each piece", len(got), err, exp.Len())
	}
}

func TestFormPairs(t *testing.T) {
	value := "ghp_Ab3/+xYz09Qq7wLmNoPqRsTu\"<v>"
	ph, err := NewPlaceholder(value)
	if err != nil {
		t.Fatal(err)
	}
	pairs := formPairs(value, ph)
	var froms []string
	for _, p := range pairs {
		froms = append(froms, p.value)
		if len(p.value) != len(p.placeholder) {
			t.Errorf("form %q of the value and %q of the placeholder differ in length", p.value, p.placeholder)
		}
		if strings.Contains(p.placeholder, value) {
			t.Errorf("placeholder form %q contains the value", p.placeholder)
		}
	}
	want := redact.Forms(value)
	slices.Sort(froms)
	slices.Sort(want)
	if !slices.Equal(froms, want) {
		t.Errorf("formPairs forms = %q, want redact.Forms %q", froms, want)
	}
}
