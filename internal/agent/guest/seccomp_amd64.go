package guest

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	checkX32  = true
)

var archDeniedSyscalls = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM}
