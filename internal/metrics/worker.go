package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/helmr/helmr/internal/sandbox"
	"github.com/helmr/helmr/internal/sandbox/network"
)

// Worker holds a worker's series: its sandboxes' start and restore
// durations by tier, its slots, and the egress its sandboxes were denied.
type Worker struct {
	start   *prometheus.HistogramVec
	restore *prometheus.HistogramVec
	failed  *prometheus.CounterVec
	denied  *prometheus.CounterVec
	reg     prometheus.Registerer
}

// NewWorker registers a worker's series with reg.
func NewWorker(reg prometheus.Registerer) *Worker {
	m := &Worker{
		start: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "sandbox_start_duration_seconds",
			Help:    "Time to start a sandbox until its guest agent is ready, by tier (runs, warm pool, workspace operations, builds).",
			Buckets: durationBuckets,
		}, []string{"tier"}),
		restore: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "sandbox_restore_duration_seconds",
			Help:    "Time to restore a sandbox from a checkpoint (a parked run, a paused workspace), by tier.",
			Buckets: durationBuckets,
		}, []string{"tier"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "sandbox_start_failures_total",
			Help: "Sandbox starts and restores that failed, by tier and operation (start, restore).",
		}, []string{"tier", "op"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "egress_denials_total",
			Help: "Connections and lookups of sandboxes that the egress policy refused, by protocol (tcp, udp, dns).",
		}, []string{"proto"}),
		reg: reg,
	}
	reg.MustRegister(m.start, m.restore, m.failed, m.denied)
	return m
}

// Denied counts one refused connection or lookup (network.Config.Tally).
func (m *Worker) Denied(d network.Denial) {
	m.denied.WithLabelValues(d.Proto).Inc()
}

// Slots registers the gauges of the worker's run slots: how many it has
// and how many runs hold one (inUse, read when scraped).
func (m *Worker) Slots(total int, inUse func() int) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "worker_slots",
			Help: "Runs the worker takes at once (HELMR_SLOTS)."}, func() float64 { return float64(total) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "worker_slots_in_use",
			Help: "Runs the worker is executing now."}, func() float64 { return float64(inUse()) }),
	)
}

// closer is the optional Close of a runtime (the worker closes it when
// it stops).
type closer interface {
	Close(ctx context.Context) error
}

// Instrument returns rt timing its sandboxes' starts and restores into
// m. The result has the same optional capabilities as rt
// (sandbox.Checkpointer, sandbox.GuestKernel, Close), since callers
// branch on them, and rt's sandbox.Traits.
func (m *Worker) Instrument(rt sandbox.Runtime) sandbox.Runtime {
	t := &timed{Runtime: rt, m: m}
	ck, isCk := rt.(sandbox.Checkpointer)
	gk, isGK := rt.(sandbox.GuestKernel)
	cl, isCl := rt.(closer)
	tc := &timedCheckpointer{ck: ck, t: t}
	switch {
	case isCk && isGK && isCl:
		return struct {
			*timed
			*timedCheckpointer
			sandbox.GuestKernel
			closer
		}{t, tc, gk, cl}
	case isCk && isGK:
		return struct {
			*timed
			*timedCheckpointer
			sandbox.GuestKernel
		}{t, tc, gk}
	case isCk && isCl:
		return struct {
			*timed
			*timedCheckpointer
			closer
		}{t, tc, cl}
	case isGK && isCl:
		return struct {
			*timed
			sandbox.GuestKernel
			closer
		}{t, gk, cl}
	case isCk:
		return struct {
			*timed
			*timedCheckpointer
		}{t, tc}
	case isGK:
		return struct {
			*timed
			sandbox.GuestKernel
		}{t, gk}
	case isCl:
		return struct {
			*timed
			closer
		}{t, cl}
	}
	return t
}

// timed is a runtime whose Start is timed.
type timed struct {
	sandbox.Runtime
	m *Worker
}

func (t *timed) Start(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	start := time.Now()
	sb, err := t.Runtime.Start(ctx, spec)
	t.m.observe(t.m.start, t.Name(), "start", start, err)
	return sb, err
}

// Traits implements sandbox.TraitsReporter: rt's.
func (t *timed) Traits() sandbox.Traits { return sandbox.TraitsOf(t.Runtime) }

// timedCheckpointer is a runtime's Checkpointer whose Restore is timed.
type timedCheckpointer struct {
	ck sandbox.Checkpointer
	t  *timed
}

func (c *timedCheckpointer) Checkpoint(ctx context.Context, sb sandbox.Sandbox, dir string) error {
	return c.ck.Checkpoint(ctx, sb, dir)
}

func (c *timedCheckpointer) Restore(ctx context.Context, spec sandbox.Spec, dir string) (sandbox.Sandbox, error) {
	start := time.Now()
	sb, err := c.ck.Restore(ctx, spec, dir)
	c.t.m.observe(c.t.m.restore, c.t.Name(), "restore", start, err)
	return sb, err
}

func (m *Worker) observe(h *prometheus.HistogramVec, tier, op string, start time.Time, err error) {
	if err != nil {
		m.failed.WithLabelValues(tier, op).Inc()
		return
	}
	h.WithLabelValues(tier).Observe(time.Since(start).Seconds())
}
