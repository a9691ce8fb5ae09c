package network

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/url"
	"sort"
	"strings"

	"github.com/helmr/helmr/internal/redact"
)

// rule replaces from with to; hit, if set, is called on each occurrence
// (a rule whose to equals its from only notices).
type rule struct {
	from, to []byte
	hit      func()
}

// replacer replaces several strings at once, in one left-to-right pass:
// at each position the earliest occurrence wins, the longest at a tie.
type replacer struct {
	rules   []rule
	hold    int  // the longest from less one: what a stream holds back
	sameLen bool // every to is as long as its from
}

func newReplacer(rules []rule) *replacer {
	r := &replacer{sameLen: true}
	for _, ru := range rules {
		if len(ru.from) == 0 {
			continue
		}
		r.rules = append(r.rules, ru)
		r.hold = max(r.hold, len(ru.from)-1)
		r.sameLen = r.sameLen && len(ru.to) == len(ru.from)
	}
	sort.SliceStable(r.rules, func(i, j int) bool { return len(r.rules[i].from) > len(r.rules[j].from) })
	return r
}

func (r *replacer) empty() bool { return r == nil || len(r.rules) == 0 }

// process replaces in in the occurrences that start before limit (every
// one of which lies wholly in in, when len(in)-limit >= hold). It returns
// the output (in[:limit] itself when nothing matched, else scratch
// appended to) and how much of in it stands for (limit, or the end of an
// occurrence straddling it).
func (r *replacer) process(in []byte, limit int, scratch *[]byte) (out []byte, consumed int) {
	i, replaced := 0, false
	for {
		pos, best := -1, -1
		for k := range r.rules {
			f := r.rules[k].from
			end := min(len(in), limit+len(f)-1)
			if end-i < len(f) {
				continue
			}
			if j := bytes.Index(in[i:end], f); j >= 0 && (pos < 0 || i+j < pos) {
				pos, best = i+j, k
			}
		}
		if pos < 0 {
			if !replaced {
				return in[:limit], limit
			}
			*scratch = append(*scratch, in[i:limit]...)
			return *scratch, limit
		}
		if !replaced {
			*scratch = (*scratch)[:0]
			replaced = true
		}
		ru := &r.rules[best]
		*scratch = append(*scratch, in[i:pos]...)
		*scratch = append(*scratch, ru.to...)
		if ru.hit != nil {
			ru.hit()
		}
		i = pos + len(ru.from)
		if i >= limit {
			return *scratch, i
		}
	}
}

// replaceString applies r to all of s.
func (r *replacer) replaceString(s string) string {
	if r.empty() {
		return s
	}
	var scratch []byte
	out, _ := r.process([]byte(s), len(s), &scratch)
	return string(out)
}

// replaceBufSize is the stream buffer: large, so that scanning and
// copying run over big chunks.
const replaceBufSize = 256 << 10

// replaceReader is src with r applied, streaming: of what it has read it
// holds back only a tail that could begin an occurrence, until it knows
// what follows (so a stream that pauses between events is not delayed
// unless it paused inside what may be a value).
type replaceReader struct {
	r        *replacer
	src      io.Reader
	buf      []byte // buf[:n] read and not yet processed or handed out
	n        int
	scratch  []byte
	pending  []byte // output not yet read
	consumed int    // the part of buf[:n] pending stands for
	srcErr   error
}

func newReplaceReader(r *replacer, src io.Reader) *replaceReader {
	return &replaceReader{r: r, src: src, buf: make([]byte, max(replaceBufSize, 4*r.hold))}
}

func (rr *replaceReader) Read(p []byte) (int, error) {
	for {
		if len(rr.pending) > 0 {
			k := copy(p, rr.pending)
			rr.pending = rr.pending[k:]
			return k, nil
		}
		if rr.consumed > 0 {
			rr.n = copy(rr.buf, rr.buf[rr.consumed:rr.n])
			rr.consumed = 0
		}
		if rr.srcErr != nil {
			if rr.n == 0 {
				return 0, rr.srcErr
			}
		} else {
			k, err := rr.src.Read(rr.buf[rr.n:])
			rr.n += k
			rr.srcErr = err
		}
		limit := rr.n
		if rr.srcErr == nil {
			limit -= rr.r.partial(rr.buf[:rr.n])
		}
		if limit <= 0 {
			continue
		}
		rr.pending, rr.consumed = rr.r.process(rr.buf[:rr.n], limit, &rr.scratch)
	}
}

// partial is the length of the longest tail of in that is a proper
// prefix of a rule's from: what may be the start of an occurrence. No
// occurrence starting before it runs past in's end.
func (r *replacer) partial(in []byte) int {
	longest := 0
	for k := range r.rules {
		f := r.rules[k].from
		for n := min(len(f)-1, len(in)); n > longest; n-- {
			if bytes.HasPrefix(f, in[len(in)-n:]) {
				longest = n
				break
			}
		}
	}
	return longest
}

// formPair is one encoded form of a value and the same form of its
// placeholder.
type formPair struct{ value, placeholder string }

// formPairs returns the forms redact.Forms lists for value, each with the
// corresponding form of placeholder.
func formPairs(value, placeholder string) []formPair {
	seen := map[string]bool{value: true}
	out := []formPair{{value, placeholder}}
	add := func(v, p string) {
		if len(v) >= redact.MinEncoded && !seen[v] && v != p {
			seen[v] = true
			out = append(out, formPair{v, p})
		}
	}
	jsonContent := func(s string) string {
		q, _ := json.Marshal(s)
		return string(q[1 : len(q)-1])
	}
	add(jsonContent(value), jsonContent(placeholder))
	add(url.QueryEscape(value), url.QueryEscape(placeholder))
	add(url.PathEscape(value), url.PathEscape(placeholder))
	add(hex.EncodeToString([]byte(value)), hex.EncodeToString([]byte(placeholder)))
	add(strings.ToUpper(hex.EncodeToString([]byte(value))), strings.ToUpper(hex.EncodeToString([]byte(placeholder))))
	urlAlphabet := strings.NewReplacer("+", "-", "/", "_")
	vc, pc := base64Cores(value), base64Cores(placeholder)
	for k := range min(len(vc), len(pc)) {
		add(vc[k], pc[k])
		add(urlAlphabet.Replace(vc[k]), urlAlphabet.Replace(pc[k]))
	}
	return out
}

// base64Cores is redact's: for each offset k (0, 1, 2) of v's first byte
// within a 3-byte group, the base64 characters v's bytes alone determine.
func base64Cores(v string) []string {
	var out []string
	for k := range 3 {
		enc := base64.RawStdEncoding.EncodeToString(append(make([]byte, k), v...))
		from := (8*k + 5) / 6
		to := (8 * (k + len(v))) / 6
		if to-from > 0 && to <= len(enc) {
			out = append(out, enc[from:to])
		}
	}
	return out
}
