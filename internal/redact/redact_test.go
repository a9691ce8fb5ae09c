package redact

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
)

func marker(name string) string { return "[" + name + "]" }

// TestBase64AnyAlignment: a value base64-encoded inside longer data (any
// prefix, any suffix, either alphabet) leaves one of its forms in the
// encoding, and replacing the forms leaves no 4 characters in a row that
// only the value determines.
func TestBase64AnyAlignment(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, v := range []string{"hunter2-token", "ghp_16C7e42F292c6912E7710c838347Ae178B4a", "S3CR3T!", "x\x00\xffy-binary\n"} {
		set := New(map[string]string{"TOKEN": v})
		for pre := range 7 {
			for post := range 4 {
				data := make([]byte, 0, pre+len(v)+post)
				for range pre {
					data = append(data, byte(r.IntN(256)))
				}
				data = append(data, v...)
				for range post {
					data = append(data, byte(r.IntN(256)))
				}
				for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
					text := "Authorization: Basic " + enc.EncodeToString(data) + "\n"
					got := set.Replace(text, marker)
					if got == text {
						t.Errorf("%q after %d bytes, before %d: its base64 %q was not found", v, pre, post, text)
					}
				}
			}
		}
	}
}

func TestForms(t *testing.T) {
	v := `p@ss "word"/ü`
	forms := Forms(v)
	want := []string{v, `p@ss \"word\"/ü`, url.QueryEscape(v), url.PathEscape(v), hex.EncodeToString([]byte(v)),
		strings.ToUpper(hex.EncodeToString([]byte(v))), base64.RawStdEncoding.EncodeToString([]byte(v))[:len(v)*8/6]}
	for _, w := range want {
		found := false
		for _, f := range forms {
			found = found || f == w
		}
		if !found {
			t.Errorf("Forms(%q) = %q, lacks %q", v, forms, w)
		}
	}
	for i := 1; i < len(forms); i++ {
		if len(forms[i]) > len(forms[i-1]) {
			t.Errorf("Forms not longest first: %q", forms)
		}
	}
	if Forms("") != nil {
		t.Errorf("Forms(\"\") = %q, want none", Forms(""))
	}
	// A short value's encodings are too short to keep (they would match
	// unrelated text), but the value itself is always a form.
	if f := Forms("ab"); len(f) != 1 || f[0] != "ab" {
		t.Errorf("Forms(ab) = %q, want only ab", f)
	}
	q, _ := json.Marshal(v)
	if got := New(map[string]string{"P": v}).Replace(`{"password":`+string(q)+`}`, marker); got != `{"password":"[P]"}` {
		t.Errorf("Replace(JSON) = %s", got)
	}
}

// TestSetSafeCut: no cut splits a form, whichever of the value's forms
// straddles the limit.
func TestSetSafeCut(t *testing.T) {
	v := "secret-value"
	set := New(map[string]string{"A": v})
	for _, form := range Forms(v) {
		text := "0123456789" + form + "0123"
		for limit := 0; limit <= len(text); limit++ {
			n := set.SafeCut(text, limit)
			if n > limit {
				t.Fatalf("SafeCut(%q, %d) = %d, past the limit", text, limit, n)
			}
			if limit > 10 && limit < 10+len(form) && n != 10 {
				t.Errorf("SafeCut(%q, %d) = %d, want 10 (before the form straddling it)", text, limit, n)
			}
		}
	}
	if set.Lookahead() != len(hex.EncodeToString([]byte(v)))-1 {
		t.Errorf("Lookahead = %d, want the hex form's length less one", set.Lookahead())
	}
}
