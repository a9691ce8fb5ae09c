// Package testenv holds test helpers shared across packages: building the
// binaries once, locating the base root filesystem, and skipping (or, under
// HELMR_REQUIRE_ALL=1 as CI sets it, failing) when the host lacks something.
package testenv

import (
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Require skips t with reason when ok is false, or fails it when
// HELMR_REQUIRE_ALL=1 (CI installs everything, so nothing may skip there).
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("HELMR_REQUIRE_ALL") == "1" {
		t.Fatalf("prerequisite missing (HELMR_REQUIRE_ALL=1): %s", reason)
	}
	t.Skip(reason)
}

// RequireHost skips t, with reason, when ok is false, for what this host
// cannot do by its nature and no install script can change: a KVM that
// boots no stock kernel (a nested PVM hypervisor), a VMM no registry here
// offers. Unlike Require it skips under HELMR_REQUIRE_ALL=1 too, and it
// never passes: the test is reported as skipped, its reason starting "NOT
// RUN here:". Whatever a script installs (QEMU, runsc, a kernel, root)
// belongs to Require, which fails on CI.
func RequireHost(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	t.Skip(NotRunHere + reason)
}

// NotRunHere starts the reason of a test RequireHost skipped.
const NotRunHere = "NOT RUN here: "

// RequireRoot needs euid 0 (namespaces with id ranges, cgroups).
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root for namespaces and cgroups")
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// CacheDir is the Helmr cache holding built-in base images.
func CacheDir() string {
	if d := os.Getenv("HELMR_CACHE_DIR"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "helmr")
}

// BaseRootfs returns the built-in base image's root filesystem, skipping
// (failing on CI) when scripts/build-base-rootfs.sh has not built it.
func BaseRootfs(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HELMR_BASE_ROOTFS"); p != "" {
		return p
	}
	p := filepath.Join(CacheDir(), "bases", "bookworm-node22", "rootfs")
	_, err := os.Stat(filepath.Join(p, "usr", "local", "bin", "node"))
	Require(t, err == nil, "base rootfs missing at "+p+": run scripts/build-base-rootfs.sh")
	return p
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// Binaries builds helmr and the static helmr-agent once per test process
// and returns the directory holding both.
func Binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() { binDir, buildErr = BuildBinaries() })
	if buildErr != nil {
		t.Fatalf("build binaries: %v", buildErr)
	}
	return binDir
}
