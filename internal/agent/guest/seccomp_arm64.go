package guest

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	checkX32  = false
)

var archDeniedSyscalls []uintptr
