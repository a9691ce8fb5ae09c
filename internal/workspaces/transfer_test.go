package workspaces

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCutPart(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	for n := 1; n < len(s)+2; n++ {
		p := cutPart(s, n)
		if len(p) > n || !utf8.ValidString(p) || (len(p) == 0 && n >= 2) {
			t.Errorf("cutPart(%d) = %q", n, p)
		}
	}
	if p := cutPart("abcdef", 4); p != "abcd" {
		t.Errorf("cutPart(ascii, 4) = %q", p)
	}
}
