package worker

import (
	"sync/atomic"
	"testing"
)

// TestBackgroundStopWaits: Stop returns only after the work that runs has
// ended, and no work starts after it.
func TestBackgroundStopWaits(t *testing.T) {
	var b background
	release := make(chan struct{})
	started := make(chan struct{})
	var done atomic.Bool
	if !b.Go(func() {
		close(started)
		<-release
		done.Store(true)
	}) {
		t.Fatal("Go before Stop = false, want true")
	}
	<-started
	stopped := make(chan struct{})
	go func() { b.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while work still ran")
	default:
	}
	close(release)
	<-stopped
	if !done.Load() {
		t.Error("Stop returned before the work ended")
	}
	if b.Go(func() { t.Error("work ran after Stop") }) {
		t.Error("Go after Stop = true, want false")
	}
}
