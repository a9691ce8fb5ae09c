package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaults(t *testing.T) {
	d := Default()
	if d.Warm != 1 || d.Slots != 4 || d.Runtime != "auto" || d.Env != "dev" || d.Addr != "127.0.0.1:8480" {
		t.Errorf("Default() = %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("Default().Validate() = %v", err)
	}
}

func TestFromEnvAndValidate(t *testing.T) {
	env := map[string]string{"HELMR_DATA_DIR": "/d", "HELMR_SLOTS": "3", "HELMR_WARM": "0", "HELMR_URL": "http://h:1"}
	c, err := Default().FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/d" || c.Slots != 3 || c.Warm != 0 || c.URL != "http://h:1" || c.Env != "dev" {
		t.Errorf("FromEnv() = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	if _, err := Default().FromEnv(func(k string) string { return map[string]string{"HELMR_SLOTS": "many"}[k] }); err == nil {
		t.Error("HELMR_SLOTS=many accepted")
	}
	bad := Default()
	bad.Slots, bad.Runtime, bad.URL, bad.Warm = 0, "firecracker", "ftp://x", -1
	err = bad.Validate()
	for _, want := range []string{"slots", "firecracker", "ftp://x", "warm"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want a problem naming %q", err, want)
		}
	}
}

func TestProfileIsPrivate(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "profile.json")
	if got, err := LoadProfile(p); err != nil || got != (Profile{}) {
		t.Fatalf("LoadProfile(missing) = %+v, %v", got, err)
	}
	if err := SaveProfile(p, Profile{URL: "http://x", Project: "p"}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("profile mode = %v, %v; want 0600", st.Mode(), err)
	}
	got, err := LoadProfile(p)
	if err != nil || got.URL != "http://x" || got.Project != "p" {
		t.Errorf("LoadProfile() = %+v, %v", got, err)
	}
}
