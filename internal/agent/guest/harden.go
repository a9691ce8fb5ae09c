package guest

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// agentCaps are the capabilities the agent keeps for itself once hardened:
// enough to start processes as another uid/gid and to signal them, and to
// place a run's secret files with their declared owner and mode (CHOWN,
// DAC_OVERRIDE, FOWNER). Its children get none (see Harden).
var agentCaps = []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_KILL,
	unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_FOWNER}

// LimitExec is the first half of the lockdown, on every thread of the
// agent (the bounding set, no_new_privs and the ambient set are per thread;
// threads created later copy them):
//
//   - no_new_privs, so no exec can gain privileges;
//   - an empty bounding set and an empty ambient set, so that every process
//     the agent starts ends with no capabilities, even as uid 0 of the
//     sandbox's user namespace.
//
// None of it limits the agent's own effective capabilities, so it runs
// before Setup, ahead of init (see Prepare). It needs a binary built without
// cgo (syscall.AllThreadsSyscall).
func LimitExec() error { return LimitExecKeeping(nil) }

// LimitExecKeeping is LimitExec leaving keep in the bounding set: uid 0
// processes the agent starts then hold those capabilities (an image build
// step's root, inside a guest kernel of its own; see BuildCapsEnv).
func LimitExecKeeping(keep []uintptr) error {
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := uintptr(0); c <= last; c++ {
		if slices.Contains(keep, c) {
			continue
		}
		if err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	_, _, errno := syscall.AllThreadsSyscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("clear ambient capabilities: %w", errno)
	}
	return nil
}

// Harden completes the lockdown after LimitExec and Setup, on every thread:
// the agent's effective and permitted sets are cut to agentCaps and its
// inheritable set emptied, and the seccomp filter, which children inherit,
// is installed. It checks that LimitExec ran (no_new_privs is set).
func Harden() error {
	nnp, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
	if err != nil || nnp != 1 {
		return fmt.Errorf("harden: no_new_privs is not set (LimitExec must run first): %v", err)
	}
	if err := capset(agentCaps); err != nil {
		return err
	}
	return installSeccomp()
}

func allThreads(trap, a1, a2, a3 uintptr) error {
	if _, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3); errno != 0 {
		return errno
	}
	return nil
}

func lastCap() (uintptr, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read cap_last_cap: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse cap_last_cap: %w", err)
	}
	return uintptr(n), nil
}

// capset sets effective and permitted to keep and inheritable to nothing.
func capset(keep []uintptr) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	for _, c := range keep {
		data[c/32].Effective |= 1 << (c % 32)
		data[c/32].Permitted |= 1 << (c % 32)
	}
	_, _, errno := syscall.AllThreadsSyscall(unix.SYS_CAPSET,
		uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	if errno != 0 {
		return fmt.Errorf("capset: %w", errno)
	}
	return nil
}
