package sandboxtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/helmr/helmr/internal/testenv"
)

// AgentPackage is the import path of the guest agent's main package.
const AgentPackage = "github.com/helmr/helmr/cmd/helmr-agent"

// BuildAgent builds a static helmr-agent (CGO_ENABLED=0) into dir, makes
// dir world-searchable and the binary world-executable, and returns its
// path. Call it once per test binary (TestMain).
func BuildAgent(dir string) (string, error) {
	out := filepath.Join(dir, "helmr-agent")
	cmd := exec.Command("go", "build", "-o", out, AgentPackage)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build helmr-agent: %w\n%s", err, b)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	return out, os.Chmod(out, 0o755)
}

// MainWithAgent is a TestMain for a package whose tests start sandboxes:
// as root it builds helmr-agent once into a temporary directory and sets
// *agent to its path (elsewhere the tests that need it skip, through
// testenv.RequireRoot), runs the tests and returns their exit code.
func MainWithAgent(m *testing.M, agent *string) int {
	if os.Geteuid() != 0 {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "helmr-agent-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *agent, err = BuildAgent(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// BaseRootFS returns the base root filesystem (HELMR_BASE_ROOTFS, else
// bases/bookworm-node22/rootfs under HELMR_CACHE_DIR or ~/.cache/helmr, as
// scripts/build-base-rootfs.sh lays it out) or skips the test if it has
// not been built.
func BaseRootFS(t *testing.T) string {
	t.Helper()
	return testenv.BaseRootfs(t)
}
