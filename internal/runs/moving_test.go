package runs

import (
	"testing"

	"github.com/helmr/helmr/internal/workspaces"
)

// TestMovable is the rule for dropping a workspace's host: only when no
// worker of the host is live and the files can follow.
func TestMovable(t *testing.T) {
	snap := &workspaces.Snapshot{Seq: 3, BlobID: "wss_x", Size: 10}
	live := map[string]bool{"h1": true}
	for _, c := range []struct {
		name   string
		ws     workspaces.Workspace
		host   string
		parked bool
		want   bool
	}{
		{"host live, snapshot", workspaces.Workspace{Host: "h1", Snapshot: snap}, "h1", false, false},
		{"host gone, snapshot", workspaces.Workspace{Host: "h2", Snapshot: snap}, "h2", false, true},
		{"host gone, no snapshot", workspaces.Workspace{Host: "h2"}, "h2", false, false},
		{"host gone, no snapshot, parked run", workspaces.Workspace{Host: "h2"}, "h2", true, true},
		{"host live, parked run", workspaces.Workspace{Host: "h1"}, "h1", true, false},
		{"no host", workspaces.Workspace{Snapshot: snap}, "", false, false},
	} {
		if got := movable(c.ws, c.host, live, c.parked); got != c.want {
			t.Errorf("movable(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}
