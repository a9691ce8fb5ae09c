package main

import (
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		d    []time.Duration
		q    float64
		want time.Duration
	}{
		{ms(5), 0.5, 5 * time.Millisecond},
		{ms(5), 0.9, 5 * time.Millisecond},
		{ms(3, 1, 2), 0.5, 2 * time.Millisecond},
		{ms(4, 1, 3, 2), 0.5, 2 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 0.9, 9 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 1, 10 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 11), 0.9, 10 * time.Millisecond},
	} {
		if got := quantile(tc.d, tc.q); got != tc.want {
			t.Errorf("quantile(%v, %v) = %v, want %v", tc.d, tc.q, got, tc.want)
		}
	}
}

func TestInterleave(t *testing.T) {
	var calls []string
	next := map[string]time.Duration{}
	f := func(name string) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			calls = append(calls, name)
			next[name]++
			return next[name], nil
		}
	}
	h, b, err := interleave(3, 2, f("h"), f("b"))
	if err != nil {
		t.Fatal(err)
	}
	want := "h b b h h b b h h b"
	if got := strings.Join(calls, " "); got != want {
		t.Errorf("interleave calls = %q, want %q (alternating which goes first)", got, want)
	}
	// The first two rounds are warm-ups; each side's samples are its own.
	if len(h) != 3 || len(b) != 3 || h[0] != 3 || h[2] != 5 || b[0] != 3 || b[2] != 5 {
		t.Errorf("interleave = helmr %v, bare %v; want each side's calls 3..5", h, b)
	}
}
