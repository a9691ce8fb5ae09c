package microvm

import (
	"errors"
	"fmt"
	"time"

	"github.com/helmr/helmr/internal/sandbox"
)

// lostWait bounds how long an Exec whose agent stream broke waits for
// QEMU's exit, to say why: the stream may end a moment before QEMU has
// been waited for.
const lostWait = 2 * time.Second

// lost returns what an Exec that failed with err reports when its VM is
// gone: QEMU's exit and the console's last lines (wrapping
// sandbox.ErrGuestRuntime), or nil while QEMU runs on (err is the Exec's
// own, a checkpoint's included).
func (s *Sandbox) lost(err error) error {
	if err == nil || errors.Is(err, sandbox.ErrCheckpointed) {
		return nil
	}
	if errors.Is(err, sandbox.ErrGuestRuntime) {
		select {
		case <-s.exited:
		case <-time.After(lostWait):
		}
	}
	dead := s.alive()
	switch {
	case dead == nil:
		return nil
	case errors.Is(err, sandbox.ErrGuestRuntime):
		return dead // the broken stream says no more than that
	}
	return fmt.Errorf("%w: %w", dead, err)
}
