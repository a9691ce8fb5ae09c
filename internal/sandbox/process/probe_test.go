package process

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProbe(t *testing.T) {
	requiresProcessTier(t)
	if err := Probe(""); err != nil {
		t.Errorf("Probe() on a host that runs the tier = %v", err)
	}
	empty := t.TempDir()
	err := Probe(empty)
	if err == nil || !strings.Contains(err.Error(), "memory, pids, cpu") {
		t.Errorf("Probe(%s) = %v, want the missing controllers named", empty, err)
	}
	v2 := t.TempDir()
	os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644)
	if got := missingControllers(v2); len(got) != 0 {
		t.Errorf("missingControllers(v2 with all) = %v", got)
	}
}
