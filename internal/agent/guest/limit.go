package guest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ChildNprocEnv names the variable through which a tier (gVisor) asks the
// agent to cap every process it starts at that many processes per uid
// (RLIMIT_NPROC), while the agent itself stays uncapped: the agent and a
// uid-0 task share one count, and a Go program that cannot create a thread
// dies, so the cap must not apply to the agent.
const ChildNprocEnv = "HELMR_AGENT_CHILD_NPROC"

// LimitExecMode is the helmr-agent mode that applies the cap and then execs
// the real program: the cap is in place before the program's first
// instruction, with no window for a fork to escape it. An agent that can
// stay uncapped under its own limit (see SetChildNproc) does without it;
// the mode stays for agents without CAP_SYS_RESOURCE, and for those
// restored from checkpoints taken while they used it.
const LimitExecMode = "limit-exec"

// SetChildNproc makes s start every process with RLIMIT_NPROC = n (0: no
// cap). An agent holding CAP_SYS_RESOURCE (the gVisor tier grants it) sets
// the limit on itself: its children inherit it, and the guest kernel
// (gVisor's Sentry, like Linux) refuses no clone of a task with
// CAP_SYS_RESOURCE, so the agent's own threads and children are never
// refused, while its children, which end their exec without capabilities,
// are capped from their first instruction. An agent without it starts
// every process through LimitExecMode instead: one more exec per process,
// which costs milliseconds in gVisor.
func (s *Server) SetChildNproc(n uint64) error {
	if n == 0 {
		s.childNproc = 0
		return nil
	}
	exempt, err := hasEffectiveCap(unix.CAP_SYS_RESOURCE)
	if err != nil {
		return err
	}
	if exempt {
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			return fmt.Errorf("set RLIMIT_NPROC for what the agent starts: %w", err)
		}
		s.childNproc = 0
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the agent binary for %s: %w", LimitExecMode, err)
	}
	s.self, s.childNproc = self, n
	return nil
}

// hasEffectiveCap reports whether the calling thread holds capability c in
// its effective set (the agent's threads all hold the same).
func hasEffectiveCap(c uintptr) (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, fmt.Errorf("capget: %w", err)
	}
	return data[c/32].Effective&(1<<(c%32)) != 0, nil
}

// wrap returns the path and argv that start path/argv under the cap.
func (s *Server) wrap(path string, argv []string) (string, []string) {
	if s.childNproc == 0 {
		return path, argv
	}
	return s.self, append([]string{"helmr-agent", LimitExecMode, strconv.FormatUint(s.childNproc, 10), path}, argv...)
}

// RunLimitExec is LimitExecMode: args are NPROC, PATH, then the argv.
func RunLimitExec(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("usage: helmr-agent %s NPROC PATH ARGV0 [ARGS...]", LimitExecMode)
	}
	n, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil {
		return fmt.Errorf("%s: bad NPROC %q", LimitExecMode, args[0])
	}
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
		return fmt.Errorf("%s: set RLIMIT_NPROC: %w", LimitExecMode, err)
	}
	return syscall.Exec(args[1], args[2:], os.Environ())
}

// BuildCapsEnv names the variable through which a tier with a guest
// kernel of its own (gVisor) asks `helmr-agent serve` to leave these
// capabilities (comma-separated numbers) in the bounding set, so that an
// image build step running as root can do what package managers do as
// root (chown, setuid to their own users, ...): the default capabilities
// of a container, confined to the guest.
const BuildCapsEnv = "HELMR_AGENT_BUILD_CAPS"

// ParseCaps reads BuildCapsEnv's value.
func ParseCaps(v string) ([]uintptr, error) {
	var out []uintptr
	for _, f := range strings.Split(v, ",") {
		if f == "" {
			continue
		}
		n, err := strconv.ParseUint(f, 10, 8)
		if err != nil || n > 63 {
			return nil, fmt.Errorf("%s=%q: want capability numbers", BuildCapsEnv, v)
		}
		out = append(out, uintptr(n))
	}
	return out, nil
}
