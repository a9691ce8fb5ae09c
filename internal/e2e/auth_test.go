package e2e

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestDevGuardsAPI checks that helmr dev's API is closed but for the health
// check, that it gave the local CLI its owner credential through a private
// profile, and that an API key made with the CLI works only where it is
// scoped.
func TestDevGuardsAPI(t *testing.T) {
	d := startDev(t, "process")
	profile := filepath.Join(filepath.Dir(d.dataDir), "profile.json")
	if st, err := os.Stat(profile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("profile %s: %v, %v; want mode 0600", profile, st, err)
	}
	for path, want := range map[string]int{"/v1/health": 200, "/v1/runs?project=hello": 401, "/v1/apikeys": 401} {
		resp, err := http.Get(d.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a credential = %d, want %d", path, resp.StatusCode, want)
		}
	}
	d.deploy("examples/hello") // the CLI authenticates with the profile's credential

	key := strings.TrimSpace(d.mustHelmr("apikey", "create", "--project", "hello", "--env", "dev", "--grant", "runs:read", "--name", "e2e"))
	list := d.mustHelmr("apikey", "list")
	if !strings.Contains(list, "e2e") || strings.Contains(list, key) {
		t.Errorf("apikey list = %q, want the key's metadata without it", list)
	}
	withKey := append(slices.Clip(d.env), "HELMR_API_KEY="+key)
	run := func(env []string, args ...string) (string, int) {
		saved := d.env
		d.env = env
		defer func() { d.env = saved }()
		_, errOut, code := d.helmr(args...)
		return errOut, code
	}
	if errOut, code := run(withKey, "runs", "--project", "hello"); code != 0 {
		t.Errorf("runs with a runs:read key = %d %q", code, errOut)
	}
	if errOut, code := run(withKey, "run", "hello", "--project", "hello"); code == 0 || !strings.Contains(errOut, "lacks the runs:create grant") {
		t.Errorf("run with a runs:read key = %d %q, want a refusal naming the grant", code, errOut)
	}
	// A browser signs in with the owner credential and reads in its session.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm(d.url+"/dev/login", url.Values{"credential": {d.token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cookies) != 1 || !cookies[0].HttpOnly {
		t.Fatalf("sign in = %d with cookies %v, want a redirect and an HttpOnly session cookie", resp.StatusCode, cookies)
	}
	req, _ := http.NewRequest(http.MethodGet, d.url+"/v1/runs?project=hello", nil)
	req.AddCookie(cookies[0])
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Errorf("list runs in the owner session = %v, %v; want 200", resp.StatusCode, err)
	}
	// Without the profile's credential the CLI is refused.
	noProfile := append(slices.Clip(d.env), "HELMR_PROFILE="+filepath.Join(t.TempDir(), "empty.json"))
	if errOut, code := run(noProfile, "runs", "--project", "hello"); code == 0 || !strings.Contains(errOut, "HELMR_API_KEY") {
		t.Errorf("runs without a credential = %d %q, want a refusal pointing at HELMR_API_KEY", code, errOut)
	}
}
