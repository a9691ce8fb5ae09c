package config

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestDeployEnvFiles: the operator's example environment files under
// deploy/ load as config files (known settings, values of the right
// syntax), and each sets only settings of the part that reads it.
func TestDeployEnvFiles(t *testing.T) {
	for file, part := range map[string]string{"server.env.example": ControlPlane, "worker.env.example": Worker} {
		path := "../../deploy/" + file
		if _, err := Default().FromFile(path); err != nil {
			t.Errorf("FromFile(%q) = %v, want it loaded", path, err)
			continue
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			// Commented-out settings count too: "# HELMR_NAME=value".
			name, _, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "# "), "=")
			if !ok || !strings.HasPrefix(name, "HELMR_") || strings.ContainsAny(name, " ") {
				continue
			}
			s, found := Lookup(name)
			if !found {
				t.Errorf("%s: %s is no setting", file, name)
			} else if !slices.Contains(s.ReadBy, part) {
				t.Errorf("%s: %s is read by %v, not the %s", file, name, s.ReadBy, part)
			}
		}
	}
}
