package network_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/sandbox/network"
)

func TestNewPlaceholder(t *testing.T) {
	for _, v := range []string{
		"ghp_16C7e42F292c6912E7710c838347Ae178B4a", // 36 letters and digits: same length
		"sk-proj-abcDEF123",                        // 14: padded to 16 random positions
		"xoxb-1234-5678-abcdEFGH",
		"eyJhbGciOi.eyJzdWIiOiIx.SflKxwRJSM",
		"p@ss",
		"ünïcode-tökén-9",
	} {
		p, err := network.NewPlaceholder(v)
		if err != nil {
			t.Fatalf("NewPlaceholder(%q): %v", v, err)
		}
		if p == v || strings.Contains(p, v) {
			t.Errorf("NewPlaceholder(%q) = %q, contains the value", v, p)
		}
		alnum := 0
		for i := 0; i < len(v); i++ {
			vc, pc := v[i], p[i]
			switch {
			case vc >= 'a' && vc <= 'z':
				alnum++
				if pc < 'a' || pc > 'z' {
					t.Errorf("NewPlaceholder(%q) = %q: byte %d %q is not a lower-case letter", v, p, i, pc)
				}
			case vc >= 'A' && vc <= 'Z':
				alnum++
				if pc < 'A' || pc > 'Z' {
					t.Errorf("NewPlaceholder(%q) = %q: byte %d %q is not an upper-case letter", v, p, i, pc)
				}
			case vc >= '0' && vc <= '9':
				alnum++
				if pc < '0' || pc > '9' {
					t.Errorf("NewPlaceholder(%q) = %q: byte %d %q is not a digit", v, p, i, pc)
				}
			default:
				if pc != vc {
					t.Errorf("NewPlaceholder(%q) = %q: byte %d changed from %q", v, p, i, vc)
				}
			}
		}
		wantLen := len(v)
		if alnum < 16 {
			wantLen += 16 - alnum
		}
		if len(p) != wantLen {
			t.Errorf("len(NewPlaceholder(%q)) = %d, want %d", v, len(p), wantLen)
		}
		if q, _ := network.NewPlaceholder(v); q == p {
			t.Errorf("NewPlaceholder(%q) returned %q twice", v, p)
		}
	}
	// A token's type marker stays; the rest is random.
	for v, keep := range map[string]string{
		"ghp_16C7e42F292c6912E7710c838347Ae178B4a": "ghp_",
		"sk-proj-abcDEF1234567890xyz":              "sk-",
		"xoxb-1234-5678-abcdEFGH":                  "xoxb-",
		"ab1_16C7e42F292c6912E7710c838347":         "",
		"sk-short":                                 "",
	} {
		p, _ := network.NewPlaceholder(v)
		if keep != "" && !strings.HasPrefix(p, keep) || keep == "" && p[:3] == v[:3] && p[3:6] == v[3:6] {
			t.Errorf("NewPlaceholder(%q) = %q, want the prefix %q kept and nothing more", v, p, keep)
		}
	}
	for _, bad := range []string{"", "line\nbreak", "cr\rx", "nul\x00", "tab\tx", "del\x7f", "----"} {
		if p, err := network.NewPlaceholder(bad); err == nil {
			t.Errorf("NewPlaceholder(%q) = %q, want an error", bad, p)
		}
	}
}

func TestValidHost(t *testing.T) {
	for _, ok := range []string{"api.github.com", "*.github.com", "localhost", "a-b.example"} {
		if why := network.ValidHost(ok); why != "" {
			t.Errorf("ValidHost(%q) = %q, want fine", ok, why)
		}
	}
	for _, bad := range []string{"", "*", "*.", "API.github.com", "1.2.3.4", "::1", "[::1]", "github.com:443",
		"github.com.", "https://github.com", "a.*.com", "-x.com", "exa mple.com"} {
		if why := network.ValidHost(bad); why == "" {
			t.Errorf("ValidHost(%q) = fine, want a reason", bad)
		}
	}
}

func TestCARoundTrip(t *testing.T) {
	ca, err := network.NewCA("sbx-1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(ca.CertPEM(), []byte("BEGIN CERTIFICATE")) || bytes.Contains(ca.CertPEM(), []byte("PRIVATE KEY")) {
		t.Errorf("CertPEM() = %s, want the certificate alone", ca.CertPEM())
	}
	back, err := network.ParseCA(ca.MarshalPEM())
	if err != nil {
		t.Fatalf("ParseCA(MarshalPEM()) = %v", err)
	}
	if !bytes.Equal(back.CertPEM(), ca.CertPEM()) || !bytes.Equal(back.MarshalPEM(), ca.MarshalPEM()) {
		t.Error("ParseCA(MarshalPEM()) is another CA")
	}
	other, _ := network.NewCA("sbx-2")
	mixed := append(ca.CertPEM(), other.MarshalPEM()[len(other.CertPEM()):]...)
	for name, bad := range map[string][]byte{
		"empty":         nil,
		"cert only":     ca.CertPEM(),
		"garbage":       []byte("not pem"),
		"another's key": mixed,
		"two certs":     append(ca.MarshalPEM(), other.CertPEM()...),
	} {
		if _, err := network.ParseCA(bad); err == nil {
			t.Errorf("ParseCA(%s) accepted", name)
		}
	}
}
