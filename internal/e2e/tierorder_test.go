package e2e

import (
	"testing"
	"time"

	"github.com/helmr/helmr/internal/runs"
	"github.com/helmr/helmr/internal/testenv"
)

// TestTiersShareStateRoot is the README's first command and then its
// second on a host where Helmr never ran: helmr dev on one tier runs
// examples/hello on a state root nothing has made yet, then helmr dev on
// another tier (its own data dir, as the tests have) runs it on the same
// root: gvisor then process, and process then gvisor (and microvm with
// process, both ways).
func TestTiersShareStateRoot(t *testing.T) {
	built := e2eTiers()
	for _, first := range built {
		for _, second := range built {
			// A microvm pairs with the process tier only: its state is
			// kept from other users like gvisor's, and the process tier's
			// needs its levels searchable.
			if first == second || first == "microvm" && second == "gvisor" || first == "gvisor" && second == "microvm" {
				continue
			}
			t.Run(first+"-then-"+second, func(t *testing.T) {
				root := testenv.StateRoot(t)
				for _, tier := range []string{first, second} {
					d := startDev(t, tier, "HELMR_STATE_DIR="+root)
					d.mustHelmr("deploy", "examples/hello")
					r := d.waitDone(d.trigger("hello", "hello", `{"name":"`+tier+`"}`).ID, 2*time.Minute)
					if r.Status != runs.StatusCompleted || r.Tier != tier {
						t.Fatalf("run on %s after %s = %s on tier %q (error %+v), want COMPLETED on %s", tier, first, r.Status, r.Tier, r.Error, tier)
					}
					d.stop()
				}
			})
		}
	}
}
