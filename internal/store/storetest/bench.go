package storetest

import (
	"context"
	"sync/atomic"
	"testing"
)

// BenchmarkCreateRun measures CreateRun from one goroutine and reports runs/s.
func BenchmarkCreateRun(b *testing.B, open func(tb testing.TB) Store) {
	s := open(b)
	r := newRun("p", "dev", "bench")
	for b.Loop() {
		mustCreate(b, s, r)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
}

// BenchmarkCreateRunParallel measures CreateRun from GOMAXPROCS×parallelism
// goroutines and reports runs/s.
func BenchmarkCreateRunParallel(b *testing.B, open func(tb testing.TB) Store, parallelism int) {
	s := open(b)
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := newRun("p", "dev", "bench")
		for pb.Next() {
			if _, _, err := s.CreateRun(context.Background(), r); err != nil {
				b.Errorf("CreateRun: %v", err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "runs/s")
}

// BenchmarkAppendEvents measures AppendEvents of batch log events at a time
// to each of runs runs (round robin, from one goroutine, or from one
// of GOMAXPROCS goroutines when parallel) and reports events/s.
func BenchmarkAppendEvents(b *testing.B, open func(tb testing.TB) Store, batch, nruns int, parallel bool) {
	s := open(b)
	ids := make([]string, nruns)
	for i := range ids {
		ids[i] = mustCreate(b, s, newRun("p", "dev", "bench")).ID
	}
	evs := logEvents(batch, "a log line of moderate length, as a build or test tool would print it")
	b.ResetTimer()
	if !parallel {
		i := 0
		for b.Loop() {
			if _, err := s.AppendEvents(context.Background(), ids[i%nruns], evs); err != nil {
				b.Fatalf("AppendEvents: %v", err)
			}
			i++
		}
	} else {
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			id := ids[int(n.Add(1))%nruns]
			for pb.Next() {
				if _, err := s.AppendEvents(context.Background(), id, evs); err != nil {
					b.Errorf("AppendEvents: %v", err)
					return
				}
			}
		})
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
}
