package testenv

import "testing"

// TestRequireHost: a test RequireHost stops is skipped, even under
// HELMR_REQUIRE_ALL=1, never passed nor failed; one it lets through runs.
func TestRequireHost(t *testing.T) {
	for _, all := range []string{"", "1"} {
		t.Setenv("HELMR_REQUIRE_ALL", all)
		var sub testing.TB
		ran := false
		t.Run("host cannot", func(st *testing.T) {
			sub = st
			RequireHost(st, false, "no firecracker binary")
			ran = true
		})
		if !sub.Skipped() || sub.Failed() || ran {
			t.Errorf("HELMR_REQUIRE_ALL=%q: RequireHost(false): skipped %v, failed %v, went on %v; want skipped only", all, sub.Skipped(), sub.Failed(), ran)
		}
		t.Run("host can", func(st *testing.T) {
			sub = st
			RequireHost(st, true, "")
			ran = true
		})
		if sub.Skipped() || !ran {
			t.Errorf("RequireHost(true): skipped %v, went on %v; want it to go on", sub.Skipped(), ran)
		}
	}
}
