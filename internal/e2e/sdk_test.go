package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/helmr/helmr/internal/testenv"
	"github.com/helmr/helmr/internal/tsbundle"
	"github.com/helmr/helmr/internal/workspaces"
)

// TestSDKWorkspaces runs the TypeScript SDK's workspaces resource against
// helmr dev: sdk/typescript/test/live/workspaces.ts (bundled with the
// SDK's sources by esbuild, run by node) creates workspaces from a sandbox
// and a task, runs real commands in a sandbox (plain and streaming), writes
// and reads files, reads the trajectory and deletes; it fails on the first
// assertion that does not hold. This test then checks from the Go side what
// the script reported. The process tier: nothing here depends on the tier.
func TestSDKWorkspaces(t *testing.T) {
	d := startDev(t, "process")
	d.deploy("internal/e2e/testdata/workspace")
	script := filepath.Join(testenv.RepoRoot(), "sdk", "typescript", "test", "live", "workspaces.ts")
	code, err := tsbundle.TaskModule(testenv.RepoRoot(), script)
	if err != nil {
		t.Fatalf("bundle %s: %v", script, err)
	}
	bundle := filepath.Join(t.TempDir(), "workspaces.mjs")
	if err := os.WriteFile(bundle, code, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", bundle)
	cmd.Env = append(os.Environ(), "HELMR_URL="+d.url, "HELMR_API_KEY="+d.token, "HELMR_PROJECT=workspace", "HELMR_ENV=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\nstdout: %s\nstderr: %s", script, err, out, stderr.String())
	}
	t.Logf("the SDK script reported %s", bytes.TrimSpace(out))
	var saw struct {
		Workspace  string `json:"workspace"`
		Deleted    string `json:"deleted"`
		Operations int    `json:"operations"`
	}
	if err := json.Unmarshal(out, &saw); err != nil || saw.Workspace == "" || saw.Deleted == "" {
		t.Fatalf("the script printed %q (%v), want its workspaces", out, err)
	}

	// What the SDK wrote is in the workspace, as the CLI reads it.
	if got := d.mustHelmr("workspace", "cp", saw.Workspace+":dir/hello.txt", "-"); got != "héllo\n" {
		t.Errorf("helmr workspace cp %s:dir/hello.txt = %q, want the SDK's text", saw.Workspace, got)
	}
	status, body := d.get("/v1/workspaces/" + saw.Workspace + "/trajectory")
	var tr struct {
		Operations []workspaces.OpRecord `json:"operations"`
	}
	// The SDK saw every operation; the CLI's came after: whether the
	// path is a directory (a listing), then the file.
	if status != 200 || json.Unmarshal(body, &tr) != nil || len(tr.Operations) != saw.Operations+2 ||
		tr.Operations[saw.Operations].Kind != "file.list" || tr.Operations[saw.Operations+1].Kind != "file.read" {
		t.Errorf("trajectory = %d %s, want the script's %d operations and the CLI's listing and read", status, body, saw.Operations)
	}
	gone, err := d.api.GetWorkspace(context.Background(), saw.Deleted)
	if err != nil || gone.DeletedAt == nil {
		t.Errorf("workspace %s = %+v, %v; want it deleted", saw.Deleted, gone, err)
	}
}
