package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/testenv"
)

// TestDoctor checks that helmr doctor reports every tier with a reason and
// that a policy naming an unavailable tier is a clear error.
func TestDoctor(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Binaries(t)
	run := func(env []string, args ...string) (string, string, int) {
		cmd := exec.Command(filepath.Join(bin, "helmr"), args...)
		cmd.Env = append(os.Environ(), env...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return out.String(), errb.String(), code
	}
	out, errOut, code := run(nil, "doctor", "--json")
	if code != 0 {
		t.Fatalf("helmr doctor --json exited %d: %s", code, errOut)
	}
	var rep struct {
		Tiers []struct {
			Name      string
			Available bool
			Reason    string
		}
		Selected string
		Egress   struct {
			Policy string
			OK     bool
		}
		WorkspaceQuota struct {
			Quota string
			OK    bool
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor --json printed %q: %v", out, err)
	}
	names := []string{}
	for _, tr := range rep.Tiers {
		names = append(names, tr.Name)
		if tr.Reason == "" {
			t.Errorf("tier %s has no reason", tr.Name)
		}
	}
	if strings.Join(names, ",") != "microvm,gvisor,process" || rep.Selected == "" {
		t.Errorf("doctor = %+v, want the three tiers strongest first and a selection", rep)
	}
	if rep.Egress.Policy != "open" || !rep.Egress.OK || rep.WorkspaceQuota.Quota != "10Gi" || !rep.WorkspaceQuota.OK {
		t.Errorf("doctor egress %+v, workspace quota %+v; want open and 10Gi, both working here", rep.Egress, rep.WorkspaceQuota)
	}
	for env, want := range map[string]string{
		"HELMR_EGRESS=allow:10.0.0.0/33": "egress policy",
		"HELMR_WORKSPACE_QUOTA=1Mi":      "below the minimum",
		"HELMR_WORKSPACE_QUOTA=ten gigs": "workspace quota",
	} {
		if _, errOut, code := run([]string{env}, "doctor"); code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("doctor with %s = %d %q, want an error containing %q", env, code, errOut, want)
		}
	}
	// The flag overrides the environment, which overrides a config file.
	conf := filepath.Join(t.TempDir(), "helmr.conf")
	os.WriteFile(conf, []byte("HELMR_RUNTIME=gvisor\nHELMR_EGRESS=none\n"), 0o600)
	if out, errOut, code := run([]string{"HELMR_CONFIG=" + conf, "HELMR_RUNTIME=microvm"}, "doctor", "--runtime", "process"); code != 0 ||
		!strings.Contains(out, "selects: process") || !strings.Contains(out, `egress policy "none"`) {
		t.Errorf("doctor --runtime process with a config file = %d %q %q, want process selected and the file's egress", code, out, errOut)
	}
	human, _, _ := run(nil, "doctor")
	if !strings.Contains(human, "selects: "+rep.Selected) {
		t.Errorf("doctor output %q does not say which tier it selects", human)
	}
	// The microVM tier: where it runs, doctor says whether under KVM or
	// under TCG, which is no security boundary and which auto never picks;
	// where it does not, naming it is an error that names it.
	vm := rep.Tiers[0]
	out, errOut, code = run([]string{"HELMR_RUNTIME=microvm"}, "doctor")
	switch {
	case !vm.Available:
		if code == 0 || !strings.Contains(errOut, "microvm is unavailable") {
			t.Errorf("doctor with HELMR_RUNTIME=microvm = %d %q, want an error naming the tier", code, errOut)
		}
	case strings.Contains(vm.Reason, "under TCG"):
		if !strings.Contains(vm.Reason, "NOT a security boundary") || rep.Selected == "microvm" {
			t.Errorf("microvm under TCG: reason %q, auto selects %s; want the reason to say it is no boundary and auto to pass it by", vm.Reason, rep.Selected)
		}
		if code != 0 || !strings.Contains(out, "selects: microvm") {
			t.Errorf("doctor with HELMR_RUNTIME=microvm = %d %q %q, want microvm selected by name", code, out, errOut)
		}
	case !strings.Contains(vm.Reason, "under KVM") || rep.Selected != "microvm":
		t.Errorf("microvm available: reason %q, auto selects %s; want KVM and microvm", vm.Reason, rep.Selected)
	}
}
