package tiers

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/sandbox/gvisor"
)

func TestRegistry(t *testing.T) {
	seen := map[string]bool{}
	for i, tr := range All() {
		if tr.Name == "" || tr.Name == Auto || seen[tr.Name] {
			t.Errorf("tier %d has name %q: want a unique name other than %q", i, tr.Name, Auto)
		}
		seen[tr.Name] = true
		if tr.Probe == nil || tr.Isolation == "" || tr.Strength < SharedKernel {
			t.Errorf("tier %s lacks a probe, an isolation note or a strength", tr.Name)
		}
		if i > 0 && tr.Strength >= All()[i-1].Strength {
			t.Errorf("tier %s is listed after %s but is not weaker", tr.Name, All()[i-1].Name)
		}
		if got, ok := Lookup(tr.Name); !ok || got.Name != tr.Name {
			t.Errorf("Lookup(%q) = %v, %v", tr.Name, got.Name, ok)
		}
	}
	for _, name := range []string{"gvisor", "process"} {
		if !slices.Contains(Built(), name) {
			t.Errorf("Built() = %v, want %s among them", Built(), name)
		}
	}
	if _, ok := Lookup("firecracker"); ok {
		t.Error("Lookup(firecracker) found a tier")
	}
	if want := filepath.Join(DefaultStateRoot, "gvisor"); gvisor.DefaultStateDir != want {
		t.Errorf("gvisor.DefaultStateDir = %s, want %s (the gvisor tier's directory under the default state root)", gvisor.DefaultStateDir, want)
	}
}

func TestCheckPolicy(t *testing.T) {
	built := Built()
	if got, want := Policies(), "auto, "+strings.Join(built[:len(built)-1], ", ")+" or "+built[len(built)-1]; got != want {
		t.Errorf("Policies() = %q, want %q", got, want)
	}
	for _, p := range append([]string{Auto}, built...) {
		if err := CheckPolicy(p); err != nil {
			t.Errorf("CheckPolicy(%q) = %v", p, err)
		}
	}
	// A tier listed without a constructor (doctor shows it) is not one
	// an operator can choose yet.
	bad := []string{"firecracker", ""}
	for _, tr := range All() {
		if tr.New == nil {
			bad = append(bad, tr.Name)
		}
	}
	for _, p := range bad {
		if err := CheckPolicy(p); err == nil || !strings.Contains(err.Error(), `unknown runtime "`+p+`" (choose `+Policies()+")") {
			t.Errorf("CheckPolicy(%q) = %v, want unknown runtime", p, err)
		}
	}
}

func TestSelect(t *testing.T) {
	tier := func(name string, s Strength) Tier { return Tier{Name: name, Strength: s} }
	vm, gv, proc := tier("microvm", HardwareVM), tier("gvisor", UserKernel), tier("process", SharedKernel)
	// Listed out of order: auto goes by strength, not position.
	ss := []Status{
		{Tier: proc, Available: true, AutoOK: true, Detail: "namespaces"},
		{Tier: vm, Detail: "no /dev/kvm"},
		{Tier: gv, Available: true, AutoOK: true, Detail: "runsc at /x"},
	}
	// A microVM under TCG runs but is no boundary: chosen by name only.
	tcg := []Status{ss[0], {Tier: vm, Available: true, Detail: "QEMU microvm under TCG"}, ss[2]}
	kvm := []Status{ss[0], {Tier: vm, Available: true, AutoOK: true, Detail: "QEMU microvm under KVM"}, ss[2]}
	for _, c := range []struct {
		statuses []Status
		policy   string
		want     string // tier name, or a part of the error
		ok       bool
	}{
		{ss, "auto", "gvisor", true},
		{ss, "process", "process", true},
		{ss, "gvisor", "gvisor", true},
		{ss, "microvm", "runtime microvm is unavailable here: no /dev/kvm", false},
		{ss, "kvm", `unknown runtime "kvm"`, false},
		{ss[:2], "auto", "process", true},
		{ss[1:2], "auto", "no isolation tier works on this host", false},
		{tcg, "auto", "gvisor", true},
		{tcg, "microvm", "microvm", true},
		{tcg[1:2], "auto", "no isolation tier works on this host", false},
		{kvm, "auto", "microvm", true},
	} {
		got, err := Select(c.statuses, c.policy)
		switch {
		case c.ok && (err != nil || got.Name != c.want):
			t.Errorf("Select(%d tiers, %q) = %q, %v; want %s", len(c.statuses), c.policy, got.Name, err, c.want)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Select(%d tiers, %q) = %q, %v; want an error containing %q", len(c.statuses), c.policy, got.Name, err, c.want)
		}
	}
}

func TestSelectBuild(t *testing.T) {
	tier := func(name string, s Strength, builds bool) Tier {
		return Tier{Name: name, Strength: s, BuildSteps: builds}
	}
	vm, gv, proc := tier("microvm", HardwareVM, false), tier("gvisor", UserKernel, true), tier("process", SharedKernel, false)
	vm.BuildElsewhere = true
	all := []Status{
		{Tier: proc, Available: true, AutoOK: true},
		{Tier: vm, Available: true},
		{Tier: gv, Available: true, AutoOK: true},
	}
	noGVisor := []Status{all[0], all[1], {Tier: gv, Detail: "runsc not found"}}
	for _, c := range []struct {
		name     string
		statuses []Status
		worker   Tier
		want     string // tier name, or a part of the error
		ok       bool
	}{
		{"gvisor builds itself", all, gv, "gvisor", true},
		{"microvm: the strongest that builds", all, vm, "gvisor", true},
		{"gvisor not for auto", []Status{all[0], all[1], {Tier: gv, Available: true}}, vm, "no other tier that does", false},
		{"microvm without gvisor", noGVisor, vm, "the microvm tier runs no image build steps", false},
		{"process", all, proc, "the process tier runs no image build steps", false},
	} {
		got, err := SelectBuild(c.statuses, c.worker)
		switch {
		case c.ok && (err != nil || got.Name != c.want):
			t.Errorf("%s: SelectBuild(%s) = %q, %v; want %s", c.name, c.worker.Name, got.Name, err, c.want)
		case !c.ok && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: SelectBuild(%s) = %q, %v; want an error containing %q", c.name, c.worker.Name, got.Name, err, c.want)
		}
	}
	for _, tr := range All() {
		if tr.BuildSteps != (tr.Name == "gvisor") || tr.BuildElsewhere != (tr.Name == "microvm") {
			t.Errorf("tier %s: BuildSteps %v, BuildElsewhere %v; want only gvisor to run build steps (its overlay writes a layer with the files' owners), only microvm to run them elsewhere",
				tr.Name, tr.BuildSteps, tr.BuildElsewhere)
		}
	}
}

func TestProbeNeedsAgent(t *testing.T) {
	ok := Tier{Name: "t", Probe: func(Host) (string, error) { return "fine", nil }, New: processTier.New}
	if s := probe(ok, Host{Agent: "/bin/agent"}); !s.Available || !s.AutoOK || s.Detail != "fine" {
		t.Errorf("probe(with agent) = %+v, want available to auto: fine", s)
	}
	emulated := ok
	emulated.AutoPick = func(Host) bool { return false }
	if s := probe(emulated, Host{Agent: "/bin/agent"}); !s.Available || s.AutoOK {
		t.Errorf("probe(tier auto must not pick) = %+v, want available, not for auto", s)
	}
	if s := probe(ok, Host{AgentErr: errNoAgent}); s.Available || s.Detail != errNoAgent.Error() {
		t.Errorf("probe(no agent) = %+v, want unavailable: %v", s, errNoAgent)
	}
	unbuilt := ok
	unbuilt.New = nil
	if s := probe(unbuilt, Host{Agent: "/bin/agent"}); s.Available {
		t.Errorf("probe(tier without a constructor) = %+v, want unavailable", s)
	}
}

var errNoAgent = errors.New("helmr-agent not found next to helmr")
