package sandbox

import "errors"

// ErrExecStart: Exec could not start the process (argv[0] not found, not
// executable, bad cwd). The sandbox itself is fine; the error's message says
// what failed. Tiers return it wrapped, alongside an ExitStatus with code 127
// (not found) or 126 (other).
var ErrExecStart = errors.New("exec start")
