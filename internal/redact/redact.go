// Package redact says what a secret's value looks like in a program's
// output: the value itself, and the encodings programs commonly print it
// in without meaning to reveal it. A `curl -v -u user:TOKEN` prints the
// token inside a base64 Authorization header, a JSON log escapes it, a URL
// percent-encodes it. Callers replace every form with their redaction
// marker.
//
// This catches encodings, not transformations: a program that reverses,
// splits or encrypts a value it can read still gets it out. The value
// reaches the sandbox so that the program can use it.
package redact

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"sort"
	"strings"
)

// MinEncoded is the shortest encoded form Forms returns: shorter ones
// (of values of a few bytes) would match unrelated text.
const MinEncoded = 8

// Forms returns the strings that stand for v in text, longest first: v,
// and its forms as a JSON string's content, percent-encoded (query and
// path), hex (lower and upper case) and base64 (standard and URL
// alphabets, at each of the three alignments v can have inside longer
// base64 text: only the characters that v's bytes alone determine). An
// encoded form equal to v, or shorter than MinEncoded, is left out. It
// returns nil for an empty v.
func Forms(v string) []string {
	if v == "" {
		return nil
	}
	seen := map[string]bool{v: true}
	out := []string{v}
	add := func(f string) {
		if len(f) >= MinEncoded && !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	if q, err := json.Marshal(v); err == nil {
		add(string(q[1 : len(q)-1]))
	}
	add(url.QueryEscape(v))
	add(url.PathEscape(v))
	add(hex.EncodeToString([]byte(v)))
	add(strings.ToUpper(hex.EncodeToString([]byte(v))))
	for _, core := range base64Cores(v) {
		add(core)
		add(strings.NewReplacer("+", "-", "/", "_").Replace(core))
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// base64Cores returns, for each offset k (0, 1, 2) v's first byte can
// have within a 3-byte group of a longer input, the base64 characters
// that depend on v's bytes alone: encoding k zero bytes then v, the
// characters from the first whose 6 bits start at or after v, to the last
// whose bits end within v.
func base64Cores(v string) []string {
	var out []string
	for k := range 3 {
		enc := base64.RawStdEncoding.EncodeToString(append(make([]byte, k), v...))
		from := (8*k + 5) / 6        // first character c with 6c >= 8k
		to := (8 * (k + len(v))) / 6 // characters c with 6c+6 <= 8(k+n)
		if to-from > 0 && to <= len(enc) {
			out = append(out, enc[from:to])
		}
	}
	return out
}

// Set is the forms of some named values, longest first across all of
// them (a longer form containing a shorter one is replaced whole).
type Set struct {
	pairs []pair
	max   int
}

type pair struct{ form, name string }

// New makes the set of values (name to value); empty values are left out.
func New(values map[string]string) *Set {
	s := &Set{}
	for name, v := range values {
		for _, f := range Forms(v) {
			s.pairs = append(s.pairs, pair{f, name})
			s.max = max(s.max, len(f))
		}
	}
	sort.SliceStable(s.pairs, func(i, j int) bool {
		if len(s.pairs[i].form) != len(s.pairs[j].form) {
			return len(s.pairs[i].form) > len(s.pairs[j].form)
		}
		return s.pairs[i].name < s.pairs[j].name
	})
	return s
}

// Replace returns text with every form replaced by marker(name).
func (s *Set) Replace(text string, marker func(name string) string) string {
	for _, p := range s.pairs {
		if strings.Contains(text, p.form) {
			text = strings.ReplaceAll(text, p.form, marker(p.name))
		}
	}
	return text
}

// SafeCut returns where to cut text, at most at limit, so that no form
// is split (a prefix of one could not be recognised): limit, or the start
// of an occurrence that straddles it.
func (s *Set) SafeCut(text string, limit int) int {
	if limit >= len(text) {
		return len(text)
	}
	for moved := true; moved; {
		moved = false
		for _, p := range s.pairs {
			if len(p.form) < 2 {
				continue
			}
			// Every occurrence straddling limit lies in this window.
			lo, hi := max(0, limit-len(p.form)+1), min(len(text), limit+len(p.form)-1)
			if i := strings.Index(text[lo:hi], p.form); i >= 0 {
				limit, moved = lo+i, true
			}
		}
	}
	return limit
}

// Lookahead is how many bytes past a cut SafeCut needs to see to know
// that no form straddles it: the longest form's length less one.
func (s *Set) Lookahead() int { return max(0, s.max-1) }

// Len is how many forms the set holds.
func (s *Set) Len() int { return len(s.pairs) }
