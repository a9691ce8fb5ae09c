package config

import (
	"strings"
	"testing"
)

func TestStateDir(t *testing.T) {
	if d := Default(); d.StateDir != "/run/helmr" || d.SandboxDir != "" {
		t.Errorf("Default() state dir %q, sandbox dir %q; want /run/helmr and none (derived)", d.StateDir, d.SandboxDir)
	}
	c, err := Default().FromEnv(func(k string) string {
		return map[string]string{"HELMR_STATE_DIR": "/var/run/h", "HELMR_SANDBOX_DIR": "/srv/sb"}[k]
	})
	if err != nil || c.StateDir != "/var/run/h" || c.SandboxDir != "/srv/sb" {
		t.Errorf("FromEnv(HELMR_STATE_DIR, HELMR_SANDBOX_DIR) = %q %q, %v", c.StateDir, c.SandboxDir, err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
	for _, bad := range []Config{{StateDir: "run/helmr"}, {StateDir: "/run/helmr", SandboxDir: "sb"}} {
		c := Default()
		c.StateDir, c.SandboxDir = bad.StateDir, bad.SandboxDir
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "must be absolute") {
			t.Errorf("Validate(state dir %q, sandbox dir %q) = %v, want refused", c.StateDir, c.SandboxDir, err)
		}
	}
}
