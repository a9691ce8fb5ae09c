package guest

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Offsets into struct seccomp_data.
const (
	seccompNr       = 0
	seccompArch     = 4
	seccompArg0Low  = 16 // little-endian low half of args[0]
	x32SyscallBit   = 0x40000000
	cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
		unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
)

// deniedSyscalls fail with EPERM inside the sandbox: mounting, namespaces,
// kernel modules and keyrings, tracing other processes, and other calls
// that widen the shared kernel's attack surface. The list shared by all
// architectures; seccomp_<arch>.go adds the rest.
var deniedSyscalls = append([]uintptr{
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT,
	unix.SYS_FSOPEN, unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK,
	unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_MOUNT_SETATTR,
	unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_SETNS, unix.SYS_UNSHARE,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
	unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_LOOKUP_DCOOKIE,
	unix.SYS_PTRACE, unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
}, archDeniedSyscalls...)

func stmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }

func jump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

// seccompFilter assembles the BPF program: wrong architecture, x32 calls,
// denied calls and clone with namespace flags return EPERM; clone3 returns
// ENOSYS (its flags live in memory a filter cannot read, and libc falls back
// to clone); everything else is allowed.
func seccompFilter() []unix.SockFilter {
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	eperm := stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	allow := stmt(ret, unix.SECCOMP_RET_ALLOW)
	prog := []unix.SockFilter{
		stmt(ld, seccompArch),
		jump(jeq, auditArch, 1, 0),
		eperm,
		stmt(ld, seccompNr),
	}
	if checkX32 {
		prog = append(prog, jump(jset, x32SyscallBit, 0, 1), eperm)
	}
	for _, nr := range deniedSyscalls {
		prog = append(prog, jump(jeq, uint32(nr), 0, 1), eperm)
	}
	prog = append(prog,
		jump(jeq, unix.SYS_CLONE3, 0, 1),
		stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS)),
		jump(jeq, unix.SYS_CLONE, 0, 3),
		stmt(ld, seccompArg0Low),
		jump(jset, cloneNamespaces, 0, 1),
		eperm,
		allow,
	)
	return prog
}

// installSeccomp loads the filter on every thread of the agent; processes
// it starts inherit it.
func installSeccomp() error {
	prog := seccompFilter()
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("install seccomp filter: %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("install seccomp filter: thread %d could not be synchronized", r)
	}
	return nil
}
