package errdefs

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestKind(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"nil", nil, nil},
		{"no kind", io.EOF, nil},
		{"wrapped kind", fmt.Errorf("get run r1: %w", ErrNotFound), ErrNotFound},
		{"twice wrapped", fmt.Errorf("trigger: %w", fmt.Errorf("task t: %w", ErrConflict)), ErrConflict},
		{"Newf", Invalidf("payload is %d bytes", 3), ErrInvalid},
		{"Newf wrapping another error", TooLargef("read: %w", io.ErrUnexpectedEOF), ErrTooLarge},
		{"joined", errors.Join(io.EOF, ErrUpstream), ErrUpstream},
	} {
		if got := Kind(c.err); got != c.want {
			t.Errorf("%s: Kind(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}

func TestNewfKeepsItsMessageAndChain(t *testing.T) {
	err := Upstreamf("stage the input: %w", io.ErrShortWrite)
	if got, want := err.Error(), "stage the input: short write"; got != want {
		t.Errorf("Upstreamf(...).Error() = %q, want %q (the kind's word is not added)", got, want)
	}
	if !errors.Is(err, ErrUpstream) || !errors.Is(err, io.ErrShortWrite) {
		t.Errorf("Upstreamf(..., %%w io.ErrShortWrite) is not both ErrUpstream and io.ErrShortWrite")
	}
	if errors.Is(err, ErrNotFound) {
		t.Errorf("Upstreamf(...) is ErrNotFound, want only its own kind")
	}
}

func TestKindsAreDistinct(t *testing.T) {
	for i, a := range Kinds {
		for j, b := range Kinds {
			if i != j && errors.Is(a, b) {
				t.Errorf("kind %v is also %v", a, b)
			}
		}
	}
}
