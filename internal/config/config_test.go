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
	env := map[string]string{"HELMR_DATA_DIR": "/d", "HELMR_SLOTS": "3", "HELMR_WARM": "0", "HELMR_URL": "http://h:1", "HELMR_WORKSPACE_IDLE": "90s", "HELMR_MICROVM_VMM": "firecracker"}
	c, err := Default().FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/d" || c.Slots != 3 || c.Warm != 0 || c.URL != "http://h:1" || c.Env != "dev" || c.WorkspaceIdle.Seconds() != 90 || c.MicroVMVMM != "firecracker" {
		t.Errorf("FromEnv() = %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	if _, err := Default().FromEnv(func(k string) string { return map[string]string{"HELMR_SLOTS": "many"}[k] }); err == nil {
		t.Error("HELMR_SLOTS=many accepted")
	}
	bad := Default()
	bad.Slots, bad.Runtime, bad.URL, bad.Warm, bad.WorkspaceIdle, bad.RootSize = 0, "firecracker", "ftp://x", -1, 0, "0"
	bad.MicroVMVMM = "kvmtool"
	err = bad.Validate()
	for _, want := range []string{"slots", "firecracker", "ftp://x", "warm", "HELMR_WORKSPACE_IDLE", `HELMR_ROOT_SIZE "0"`, `HELMR_MICROVM_VMM: microvm VMM "kvmtool"`} {
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
	// A profile left readable by others is private again once rewritten
	// with a credential.
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := SaveProfile(p, Profile{URL: "http://x", Credential: "hko_secret"}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("rewritten profile mode = %v, %v; want 0600", st.Mode(), err)
	}
	if got, err := LoadProfile(p); err != nil || got.Credential != "hko_secret" {
		t.Errorf("LoadProfile() credential = %q, %v", got.Credential, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".profile-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "helmr.conf")
	os.WriteFile(path, []byte("# operator settings\nHELMR_RUNTIME=process\nHELMR_EGRESS = \"allow:10.0.0.0/8,example.com\"\nHELMR_SLOTS=7\n\nHELMR_WARM='2'\n"), 0o644)
	env := map[string]string{"HELMR_CONFIG": path, "HELMR_SLOTS": "9"}
	c, err := Load(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	// The file sets what the environment leaves alone; the environment wins.
	if c.Runtime != "process" || c.Egress != "allow:10.0.0.0/8,example.com" || c.Warm != 2 || c.Slots != 9 {
		t.Errorf("Load() = runtime %q egress %q warm %d slots %d", c.Runtime, c.Egress, c.Warm, c.Slots)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	for content, want := range map[string]string{
		"HELMR_RUNTIME=gvisor\nHELMR_RUNTME=process\n": "helmr.conf:2: unknown setting HELMR_RUNTME",
		"runtime: gvisor\n":                            "helmr.conf:1: want HELMR_NAME=value",
		"HELMR_WARM=lots\n":                            "HELMR_WARM=\"lots\": not a number",
	} {
		os.WriteFile(path, []byte(content), 0o644)
		if _, err := Load(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%q) = %v, want an error containing %q", content, err, want)
		}
	}
	env["HELMR_CONFIG"] = filepath.Join(t.TempDir(), "missing.conf")
	if _, err := Load(func(k string) string { return env[k] }); err == nil {
		t.Error("a missing HELMR_CONFIG file was ignored")
	}
	bad := Default()
	bad.Egress = "allow:"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "egress policy") {
		t.Errorf("Validate(egress allow:) = %v", err)
	}
}
