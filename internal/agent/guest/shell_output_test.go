package guest

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scanAll feeds data to a scanner in chunks of size n and returns the
// events: output text, and "<N:C>" for each prompt.
func scanAll(secret, data string, n int) []string {
	var events []string
	var text strings.Builder
	p := promptScanner{secret: []byte(secret)}
	p.out = func(b []byte) { text.Write(b) }
	p.prompt = func(num, code int) {
		if text.Len() > 0 {
			events = append(events, text.String())
			text.Reset()
		}
		events = append(events, "<"+itoa(num)+":"+itoa(code)+">")
	}
	for i := 0; i < len(data); i += n {
		p.write([]byte(data[i:min(i+n, len(data))]))
	}
	p.finish()
	if text.Len() > 0 {
		events = append(events, text.String())
	}
	return events
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestPromptScanner(t *testing.T) {
	const sec = "s3cr3t"
	tests := []struct {
		name, in string
		want     []string
	}{
		{"prompt after output", "hello\r\n" + sec + "#2:0#", []string{"hello\r\n", "<2:0>"}},
		{"output without newline", "abc" + sec + "#3:127#rest", []string{"abc", "<3:127>", "rest"}},
		{"two prompts", sec + "#1:0#" + sec + "#1:130#", []string{"<1:0>", "<1:130>"}},
		{"trace line dropped", "+ builtin source /run/x/" + sec + "/cmd\r\nout\r\n" + sec + "#4:0#", []string{"out\r\n", "<4:0>"}},
		{"declare -p line dropped", "a\r\ndeclare -- PS1=\"" + sec + "#\\#:$?#\"\r\nb\r\n" + sec + "#5:0#", []string{"a\r\nb\r\n", "<5:0>"}},
		{"almost a prompt", sec + "#12:x#\r\nkept\r\n", []string{"kept\r\n"}},
		{"partial secret is output", "s3cr\r\n" + sec[:3], []string{"s3cr\r\ns3c"}},
	}
	for _, tt := range tests {
		for _, n := range []int{1, 2, 3, 7, len(tt.in)} {
			if got := scanAll(sec, tt.in, n); !cmp.Equal(got, tt.want) {
				t.Errorf("%s: scan(%q) in chunks of %d = %q, want %q", tt.name, tt.in, n, got, tt.want)
			}
		}
	}
}

func TestPromptScannerLongLinePasses(t *testing.T) {
	long := strings.Repeat("x", maxHeldLine+10)
	got := strings.Join(scanAll("sec", long+"sec/cmd\n", 4096), "")
	if got != long+"sec/cmd\n" {
		t.Errorf("a line longer than %d was not passed whole (%d bytes)", maxHeldLine, len(got))
	}
}

// upstream is SWE-ReX's _strip_control_chars.
func upstream(s string) string {
	re := regexp.MustCompile("\x1B[@-_][0-?]*[ -/]*[@-~]")
	return strings.ReplaceAll(re.ReplaceAllString(s, ""), "\r\n", "\n")
}

func TestTextFilterMatchesUpstream(t *testing.T) {
	inputs := []string{
		"plain\r\ntext\n",
		"\x1b[1;31mred\x1b[0m\r\n",
		"\x1b]0;title\x07after",
		"\r\x1b[K\n",
		"\x1b[12\n",
		"\x1b\x1b[0mx",
		"a\r\r\nb\r",
		"\x1b[?25l\x1b(Bz\x1b",
		"tail\r",
	}
	for _, in := range inputs {
		for _, n := range []int{1, 2, len(in)} {
			var f textFilter
			var got strings.Builder
			for i := 0; i < len(in); i += n {
				f.write([]byte(in[i:min(i+n, len(in))]), func(b []byte) { got.Write(b) })
			}
			f.flush(func(b []byte) { got.Write(b) })
			if want := upstream(in); got.String() != want {
				t.Errorf("filter(%q) in chunks of %d = %q, want %q", in, n, got.String(), want)
			}
		}
	}
}

func TestCapBuf(t *testing.T) {
	c := capBuf{max: 5}
	c.write([]byte("abc"))
	c.write([]byte("defg"))
	b, cut := c.take()
	if string(b) != "abcde" || cut != 2 {
		t.Errorf("capBuf(5) after abc, defg = %q, cut %d; want abcde, 2", b, cut)
	}
}

func TestStatSession(t *testing.T) {
	sid, state, ok := statSession([]byte("42 (a (b) c) S 1 42 40 0 -1"))
	if !ok || sid != 40 || state != 'S' {
		t.Errorf("statSession = %d, %c, %v; want 40, S, true", sid, state, ok)
	}
}
