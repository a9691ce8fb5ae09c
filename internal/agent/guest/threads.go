package guest

import (
	"runtime"
	"sync"
)

// ReservedThreads is how many OS threads the agent creates up front.
const ReservedThreads = 16

// ReserveThreads makes the Go runtime create n OS threads now and keep them
// idle. The agent shares the sandbox's process limit with the task (the
// pids controller counts threads), and the Go runtime aborts when it cannot
// create a thread it needs; with threads in reserve, a task that exhausts
// the limit (a fork bomb) cannot take the agent, and so the sandbox's
// control, down with it. Each goroutine holds its thread locked until all n
// are held, then unlocks it: an unlocked goroutine's thread goes back to
// the runtime's idle list, where it stays.
func ReserveThreads(n int) {
	var held, release sync.WaitGroup
	held.Add(n)
	release.Add(1)
	var done sync.WaitGroup
	done.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			held.Done()
			release.Wait()
			runtime.UnlockOSThread()
		}()
	}
	held.Wait()
	release.Done()
	done.Wait()
}
