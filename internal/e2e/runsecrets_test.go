package e2e

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
)

// TestRunSecrets binds a vault secret to a run as an environment variable
// on each tier: the task gets the value, and its logs (even a value split
// across two writes, or JSON-escaped), its output, its error, the API and
// the database hold only the redaction marker. An unbound declared secret,
// a local source and a payload holding a secret's value are refused.
func TestRunSecrets(t *testing.T) { forEachTier(t, testRunSecrets) }

func testRunSecrets(t *testing.T, tier string) {
	d := startDev(t, tier)
	d.deploy("internal/e2e/testdata/secrets")
	const value = `tok-"quoted"-Zx81Q3vLr`
	cmd := exec.Command(filepath.Join(d.bin, "helmr"), "secret", "set", "API_TOKEN", "--project", "secrets")
	cmd.Env, cmd.Stdin = d.env, strings.NewReader(value)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("secret set: %v: %s", err, out)
	}
	escaped, _ := json.Marshal(value)
	leaks := func(where, s string) {
		t.Helper()
		if strings.Contains(s, value) || strings.Contains(s, string(escaped[1:len(escaped)-1])) {
			t.Errorf("%s holds the secret: %s", where, s)
		}
	}
	run := func(payload string) runs.Run {
		t.Helper()
		out := d.mustHelmr("run", "leaky", "--project", "secrets", "--payload-json", payload, "--secret", "API_TOKEN=vault:API_TOKEN", "--json")
		var r runs.Run
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		return d.waitDone(r.ID, 2*time.Minute)
	}
	ok := run(`{}`)
	if ok.Status != runs.StatusCompleted {
		t.Fatalf("run = %s %+v", ok.Status, ok.Error)
	}
	var out struct {
		Echo   string
		Length int
	}
	json.Unmarshal(ok.Output, &out)
	if out.Length != len(value) || out.Echo != "[redacted:API_TOKEN]" {
		t.Errorf("output = %s, want the value's length (the task got it) and the marker for the value", ok.Output)
	}
	lines := strings.Join(logLines(d.events(ok.ID)), "\n")
	if !strings.Contains(lines, "token=[redacted:API_TOKEN] (length") || !strings.Contains(lines, `in json: {"token":"[redacted:API_TOKEN]"}`) {
		t.Errorf("logs:\n%s\nwant the value replaced, split write and JSON escape included", lines)
	}
	if b64 := base64.StdEncoding.EncodeToString([]byte("u:" + value)); strings.Contains(lines, b64) || !strings.Contains(lines, "basic auth: dTp[redacted:API_TOKEN]") {
		t.Errorf("logs:\n%s\nwant the value's base64 inside %q replaced", lines, b64)
	}
	failed := run(`{"fail":true}`)
	if failed.Status != runs.StatusFailed || failed.Error == nil || !strings.Contains(failed.Error.Message, "could not use [redacted:API_TOKEN]") {
		t.Errorf("failing run = %s %+v", failed.Status, failed.Error)
	}
	for _, id := range []string{ok.ID, failed.ID} {
		for _, u := range []string{"/v1/runs/" + id, "/v1/runs/" + id + "/events"} {
			status, body := d.get(u)
			if status != 200 {
				t.Errorf("GET %s = %d %s", u, status, body)
			}
			leaks("GET "+u, string(body))
		}
	}
	d.mustHelmr("runs", "--project", "secrets") // nothing to check but that it runs
	for _, f := range []string{"helmr.db", "helmr.db-wal"} {
		data, _ := os.ReadFile(filepath.Join(d.dataDir, f))
		leaks(f, string(data))
	}

	// File and directory secrets, as an unprivileged image user.
	certs := `{"ca.pem":"-----BEGIN CA-----","client.pem":"client-key-material"}`
	for name, v := range map[string]string{"API_KEY": "key-" + value[:8], "CERTS": certs} {
		cmd := exec.Command(filepath.Join(d.bin, "helmr"), "secret", "set", name, "--project", "secrets")
		cmd.Env, cmd.Stdin = d.env, strings.NewReader(v)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("secret set %s: %v: %s", name, err, out)
		}
	}
	fout := d.mustHelmr("run", "files", "--project", "secrets", "--secret", "API_KEY=vault:API_KEY", "--secret", "CERTS=vault:CERTS", "--json")
	var fr runs.Run
	json.Unmarshal([]byte(fout), &fr)
	fr = d.waitDone(fr.ID, 2*time.Minute)
	if fr.Status != runs.StatusCompleted {
		t.Fatalf("files run = %s %+v", fr.Status, fr.Error)
	}
	var files struct {
		UID                              int
		KeyLength                        int
		KeyMode, DirMode, Ca, ClientMode string
	}
	json.Unmarshal(fr.Output, &files)
	if files.UID != 65534 || files.KeyLength != len("key-"+value[:8]) || files.KeyMode != "400" || files.DirMode != "550" ||
		files.Ca != "[redacted:CERTS]" || files.ClientMode != "440" {
		t.Errorf("files run output = %s, want nobody reading its 0400 key, a 0550 directory of 0440 files, content redacted", fr.Output)
	}
	uout := d.mustHelmr("run", "unreadable", "--project", "secrets", "--secret", "API_KEY=vault:API_KEY", "--json")
	var ur runs.Run
	json.Unmarshal([]byte(uout), &ur)
	ur = d.waitDone(ur.ID, 2*time.Minute)
	if ur.Status != runs.StatusFailed || ur.Error == nil || ur.Error.Class != runs.ClassImagePreparation || !strings.Contains(ur.Error.Message, "cannot read /run/secrets/root-only") {
		t.Errorf("unreadable run = %s %+v, want FAILED/image_preparation saying the user cannot read it", ur.Status, ur.Error)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--payload-json", "{}"}, "API_TOKEN, which the run does not bind"},
		{[]string{"--secret", "API_TOKEN=env:API_TOKEN"}, "local source"},
		{[]string{"--secret", "API_TOKEN=vault:MISSING"}, "vault secret MISSING"},
		{[]string{"--secret", "OTHER=vault:API_TOKEN", "--secret", "API_TOKEN=vault:API_TOKEN"}, "declares no secret \"OTHER\""},
		{[]string{"--secret", "API_TOKEN=vault:API_TOKEN", "--payload-json", string(must(json.Marshal(map[string]string{"t": value})))}, "the payload contains the value of the secret API_TOKEN"},
	} {
		_, errOut, code := d.helmr(append([]string{"run", "leaky", "--project", "secrets"}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("helmr run %v = %d %q, want an error containing %q", c.args, code, errOut, c.want)
		}
		leaks("the refusal", errOut)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
