package swerex

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// read_file decodes a file as upstream's Path.read_text(encoding, errors)
// does: the bytes decoded in one go (error positions count from the
// file's start), then universal newlines ("\r\n" and "\r" become "\n").
// Encodings: utf-8 (the default, as upstream's server has it on Linux),
// latin-1 and ascii, under their Python aliases. Error handlers: strict
// (the default), replace, ignore, backslashreplace, surrogateescape;
// like Python, an unknown handler is an error only once a byte needs it.

// textCodec is a decoding under Python's name for it.
type textCodec struct {
	name string // as Python's error messages spell it
	// bad returns the length of the invalid sequence at the start of b
	// (0: a valid character of size n) and why it is invalid.
	next func(b []byte) (r rune, n, bad int, reason string)
}

var codecs = map[string]textCodec{
	"utf_8":   {"utf-8", nextUTF8},
	"latin_1": {"latin-1", func(b []byte) (rune, int, int, string) { return rune(b[0]), 1, 0, "" }},
	"ascii": {"ascii", func(b []byte) (rune, int, int, string) {
		if b[0] < 0x80 {
			return rune(b[0]), 1, 0, ""
		}
		return 0, 0, 1, "ordinal not in range(128)"
	}},
}

// codecAliases are Python's names (encodings.aliases, normalized) of the
// codecs above.
var codecAliases = map[string]string{
	"utf_8": "utf_8", "utf8": "utf_8", "u8": "utf_8", "utf": "utf_8", "cp65001": "utf_8",
	"latin_1": "latin_1", "latin1": "latin_1", "latin": "latin_1", "l1": "latin_1", "iso_8859_1": "latin_1",
	"iso8859_1": "latin_1", "8859": "latin_1", "cp819": "latin_1", "iso_ir_100": "latin_1", "iso_8859_1:1987": "latin_1", "ibm819": "latin_1",
	"ascii": "ascii", "us_ascii": "ascii", "646": "ascii", "us": "ascii", "ansi_x3.4_1968": "ascii", "iso646_us": "ascii",
	"cp367": "ascii", "ibm367": "ascii", "csascii": "ascii", "iso_ir_6": "ascii",
}

// lookupCodec finds encoding as Python's codecs.lookup normalizes names;
// "" is utf-8.
func lookupCodec(encoding string) (textCodec, bool) {
	if encoding == "" {
		return codecs["utf_8"], true
	}
	norm := strings.ToLower(strings.TrimSpace(encoding))
	norm = strings.NewReplacer("-", "_", " ", "_").Replace(norm)
	c, ok := codecs[codecAliases[norm]]
	return c, ok
}

// decodeError is Python's UnicodeDecodeError, as str() shows it.
type decodeError struct {
	codec      string
	b          []byte
	start, end int
	reason     string
}

func (e *decodeError) Error() string {
	if e.end-e.start == 1 {
		return fmt.Sprintf("'%s' codec can't decode byte 0x%02x in position %d: %s", e.codec, e.b[e.start], e.start, e.reason)
	}
	return fmt.Sprintf("'%s' codec can't decode bytes in position %d-%d: %s", e.codec, e.start, e.end-1, e.reason)
}

// unknownHandler is Python's LookupError for an error handler it lacks.
type unknownHandler struct{ name string }

func (e *unknownHandler) Error() string { return "unknown error handler name '" + e.name + "'" }

// decodeText decodes b with codec under the error handler errors ("":
// strict). The result is JSON text for a string: surrogateescape's lone
// surrogates (U+DC80..U+DCFF) cannot be a Go string, so the whole answer
// is JSON, escapes included.
func decodeText(b []byte, codec textCodec, errors string) (jsonString string, err error) {
	var sb strings.Builder
	sb.Grow(len(b) + 2)
	sb.WriteByte('"')
	for i := 0; i < len(b); {
		r, n, bad, reason := codec.next(b[i:])
		if bad == 0 {
			if r == '\r' {
				r = '\n'
				if i+1 < len(b) && b[i+1] == '\n' {
					n++
				}
			}
			writeJSONRune(&sb, r)
			i += n
			continue
		}
		switch errors {
		case "", "strict":
			return "", &decodeError{codec: codec.name, b: b, start: i, end: i + bad, reason: reason}
		case "replace":
			sb.WriteString(`\ufffd`)
		case "ignore":
		case "backslashreplace":
			for _, c := range b[i : i+bad] {
				fmt.Fprintf(&sb, `\\x%02x`, c)
			}
		case "surrogateescape":
			for _, c := range b[i : i+bad] {
				if c < 0x80 { // Python refuses to escape an ASCII byte
					return "", &decodeError{codec: codec.name, b: b, start: i, end: i + bad, reason: reason}
				}
				fmt.Fprintf(&sb, `\u%04x`, 0xdc00+int(c))
			}
		default:
			return "", &unknownHandler{errors}
		}
		i += bad
	}
	sb.WriteByte('"')
	return sb.String(), nil
}

// writeJSONRune writes r as it goes inside a JSON string.
func writeJSONRune(sb *strings.Builder, r rune) {
	switch {
	case r == '"':
		sb.WriteString(`\"`)
	case r == '\\':
		sb.WriteString(`\\`)
	case r == '\n':
		sb.WriteString(`\n`)
	case r == '\t':
		sb.WriteString(`\t`)
	case r < 0x20 || r == 0x7f || r == 0x2028 || r == 0x2029:
		fmt.Fprintf(sb, `\u%04x`, r)
	default:
		sb.WriteRune(r)
	}
}

// nextUTF8 decodes one character as Python's UTF-8 decoder does: an
// invalid sequence is its maximal valid prefix (at least one byte), with
// Python's reasons.
func nextUTF8(b []byte) (rune, int, int, string) {
	c := b[0]
	if c < 0x80 {
		return rune(c), 1, 0, ""
	}
	var need int
	lo, hi := byte(0x80), byte(0xbf) // the second byte's range
	switch {
	case c >= 0xc2 && c <= 0xdf:
		need = 1
	case c == 0xe0:
		need, lo = 2, 0xa0
	case c >= 0xe1 && c <= 0xec, c == 0xee, c == 0xef:
		need = 2
	case c == 0xed:
		need, hi = 2, 0x9f
	case c == 0xf0:
		need, lo = 3, 0x90
	case c >= 0xf1 && c <= 0xf3:
		need = 3
	case c == 0xf4:
		need, hi = 3, 0x8f
	default:
		return 0, 0, 1, "invalid start byte"
	}
	for k := 1; k <= need; k++ {
		if k >= len(b) {
			return 0, 0, k, "unexpected end of data"
		}
		l, h := byte(0x80), byte(0xbf)
		if k == 1 {
			l, h = lo, hi
		}
		if b[k] < l || b[k] > h {
			return 0, 0, k, "invalid continuation byte"
		}
	}
	r, n := utf8.DecodeRune(b[:need+1])
	return r, n, 0, ""
}
