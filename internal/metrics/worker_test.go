package metrics

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
)

// fakeRuntime starts and restores nothing (nil sandboxes), or fails.
type fakeRuntime struct{ fail bool }

func (f *fakeRuntime) Name() string { return "fake" }

func (f *fakeRuntime) Start(context.Context, sandbox.Spec) (sandbox.Sandbox, error) {
	if f.fail {
		return nil, errors.New("no")
	}
	return nil, nil
}

type fakeCheckpointer struct{ restored int }

func (f *fakeCheckpointer) Checkpoint(context.Context, sandbox.Sandbox, string) error { return nil }
func (f *fakeCheckpointer) Restore(context.Context, sandbox.Spec, string) (sandbox.Sandbox, error) {
	f.restored++
	return nil, nil
}

type fakeKernel struct{}

func (fakeKernel) GuestKernelDigest() string { return "runsc@sha256:aa" }

type fakeCloser struct{ closed bool }

func (f *fakeCloser) Close(context.Context) error { f.closed = true; return nil }

// TestInstrumentKeepsCapabilities: whatever optional capabilities a
// runtime has, the instrumented one has exactly those, passes them on,
// and times its starts and restores by tier.
func TestInstrumentKeepsCapabilities(t *testing.T) {
	for mask := range 8 {
		ck, gk, cl := mask&1 != 0, mask&2 != 0, mask&4 != 0
		reg := prometheus.NewRegistry()
		m := NewWorker(reg)
		base := &fakeRuntime{}
		ckr, clr := &fakeCheckpointer{}, &fakeCloser{}
		var rt sandbox.Runtime = base
		switch {
		case ck && gk && cl:
			rt = struct {
				*fakeRuntime
				*fakeCheckpointer
				fakeKernel
				*fakeCloser
			}{base, ckr, fakeKernel{}, clr}
		case ck && gk:
			rt = struct {
				*fakeRuntime
				*fakeCheckpointer
				fakeKernel
			}{base, ckr, fakeKernel{}}
		case ck && cl:
			rt = struct {
				*fakeRuntime
				*fakeCheckpointer
				*fakeCloser
			}{base, ckr, clr}
		case gk && cl:
			rt = struct {
				*fakeRuntime
				fakeKernel
				*fakeCloser
			}{base, fakeKernel{}, clr}
		case ck:
			rt = struct {
				*fakeRuntime
				*fakeCheckpointer
			}{base, ckr}
		case gk:
			rt = struct {
				*fakeRuntime
				fakeKernel
			}{base, fakeKernel{}}
		case cl:
			rt = struct {
				*fakeRuntime
				*fakeCloser
			}{base, clr}
		}
		got := m.Instrument(rt)
		_, gotCk := got.(sandbox.Checkpointer)
		gotGK, hasGK := got.(sandbox.GuestKernel)
		gotCl, hasCl := got.(closer)
		if gotCk != ck || hasGK != gk || hasCl != cl {
			t.Errorf("Instrument(checkpointer %v, kernel %v, closer %v) has checkpointer %v, kernel %v, closer %v",
				ck, gk, cl, gotCk, hasGK, hasCl)
			continue
		}
		if got.Name() != "fake" {
			t.Errorf("Name() = %q, want fake", got.Name())
		}
		if _, err := got.Start(t.Context(), sandbox.Spec{}); err != nil {
			t.Fatal(err)
		}
		if v, _ := value(t, reg, "helmr_sandbox_start_duration_seconds", map[string]string{"tier": "fake"}); v != 1 {
			t.Errorf("mask %d: sandbox starts = %v, want 1", mask, v)
		}
		if ck {
			if _, err := got.(sandbox.Checkpointer).Restore(t.Context(), sandbox.Spec{}, "dir"); err != nil || ckr.restored != 1 {
				t.Errorf("Restore() = %v, restored %d times, want once", err, ckr.restored)
			}
			if v, _ := value(t, reg, "helmr_sandbox_restore_duration_seconds", map[string]string{"tier": "fake"}); v != 1 {
				t.Errorf("mask %d: sandbox restores = %v, want 1", mask, v)
			}
		}
		if gk && gotGK.GuestKernelDigest() != "runsc@sha256:aa" {
			t.Errorf("GuestKernelDigest() = %q", gotGK.GuestKernelDigest())
		}
		if cl {
			if err := gotCl.Close(t.Context()); err != nil || !clr.closed {
				t.Errorf("Close() = %v, closed %v", err, clr.closed)
			}
		}
	}
}

// traitedRuntime reports traits of its own.
type traitedRuntime struct {
	fakeRuntime
	traits sandbox.Traits
}

func (r *traitedRuntime) Traits() sandbox.Traits { return r.traits }

// TestInstrumentKeepsTraits: the instrumented runtime reports the traits
// of the one it wraps, the zero value for one that reports none.
func TestInstrumentKeepsTraits(t *testing.T) {
	vm := sandbox.Traits{DiskGuest: true, NoBoundary: "emulated"}
	for _, tc := range []struct {
		name string
		rt   sandbox.Runtime
		want sandbox.Traits
	}{
		{"none", &fakeRuntime{}, sandbox.Traits{}},
		{"vm", &traitedRuntime{traits: vm}, vm},
	} {
		m := NewWorker(prometheus.NewRegistry())
		if got := sandbox.TraitsOf(m.Instrument(tc.rt)); got != tc.want {
			t.Errorf("%s: TraitsOf(Instrument(rt)) = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestWorkerCounts: failed starts are counted apart from the durations;
// every denial counts by protocol; the slots gauges read the worker.
func TestWorkerCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewWorker(reg)
	rt := m.Instrument(&fakeRuntime{fail: true})
	if _, err := rt.Start(t.Context(), sandbox.Spec{}); err == nil {
		t.Fatal("Start() = nil error, want the runtime's")
	}
	if v, _ := value(t, reg, "helmr_sandbox_start_failures_total", map[string]string{"tier": "fake", "op": "start"}); v != 1 {
		t.Errorf("start failures = %v, want 1", v)
	}
	if v, _ := value(t, reg, "helmr_sandbox_start_duration_seconds", nil); v != 0 {
		t.Errorf("sandbox starts = %v after a failure, want 0", v)
	}
	m.Denied(network.Denial{Proto: "tcp", Dest: "1.2.3.4:443"})
	m.Denied(network.Denial{Proto: "tcp", Dest: "1.2.3.4:443"})
	m.Denied(network.Denial{Proto: "dns", Dest: "evil.example"})
	if v, _ := value(t, reg, "helmr_egress_denials_total", map[string]string{"proto": "tcp"}); v != 2 {
		t.Errorf("tcp denials = %v, want 2", v)
	}
	busy := 3
	m.Slots(4, func() int { return busy })
	if v, _ := value(t, reg, "helmr_worker_slots_in_use", nil); v != 3 {
		t.Errorf("slots in use = %v, want 3", v)
	}
	busy = 1
	if v, _ := value(t, reg, "helmr_worker_slots_in_use", nil); v != 1 {
		t.Errorf("slots in use = %v, want 1", v)
	}
	if v, _ := value(t, reg, "helmr_worker_slots", nil); v != 4 {
		t.Errorf("slots = %v, want 4", v)
	}
}
