package workspaces

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"testing"

	"github.com/helmr/helmr/internal/errdefs"
)

// TestBase64Output: outputEncoding=base64 carries raw bytes through JSON
// losslessly (text would turn them into U+FFFD), redacted in the bytes it
// encodes; other encodings are refused.
func TestBase64Output(t *testing.T) {
	raw := "\xff\xfe bin \x00 tok-s3cret-Vq9 \xc3"
	text, _ := json.Marshal(ExecResult{Stdout: raw})
	var back ExecResult
	json.Unmarshal(text, &back)
	if back.Stdout == raw {
		t.Fatalf("text output survived JSON unchanged: the test shows nothing")
	}
	enc := ExecResult{Stdout: raw, Stderr: "e\xff"}.Encode(EncodingBase64)
	data, _ := json.Marshal(enc)
	back = ExecResult{}
	json.Unmarshal(data, &back)
	if got, _ := base64.StdEncoding.DecodeString(back.Stdout); string(got) != raw || back.OutputEncoding != EncodingBase64 {
		t.Errorf("base64 stdout through JSON = %q (%s), want %q", got, back.OutputEncoding, raw)
	}
	if again := back.Encode(EncodingBase64); again.Stdout != back.Stdout {
		t.Errorf("Encode twice encoded twice")
	}
	red := back.Redact(map[string]string{"TOKEN": "tok-s3cret-Vq9"})
	if got, _ := base64.StdEncoding.DecodeString(red.Stdout); string(got) != "\xff\xfe bin \x00 [redacted:TOKEN] \xc3" {
		t.Errorf("redacted base64 stdout decodes to %q", got)
	}
	if err := (ExecRequest{Argv: []string{"x"}, OutputEncoding: "hex"}).Validate(); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("Validate(outputEncoding hex) = %v, want invalid", err)
	}
	for _, e := range []string{"", EncodingText, EncodingBase64} {
		if err := (ExecRequest{Argv: []string{"x"}, OutputEncoding: e}).Validate(); err != nil {
			t.Errorf("Validate(outputEncoding %q) = %v", e, err)
		}
	}
	// The trajectory cuts base64 at a whole quantum, still decodable.
	long := ExecResult{Stdout: string(make([]byte, 200<<10))}.Encode(EncodingBase64)
	cutForTrajectory(&long.Stdout, &long.StdoutTruncated, long.OutputEncoding)
	if _, err := base64.StdEncoding.DecodeString(long.Stdout); err != nil || !long.StdoutTruncated {
		t.Errorf("trajectory cut of base64: %v, truncated %v", err, long.StdoutTruncated)
	}
}
