package tsbundle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTaskModuleSDKEntryPoints: each of @helmr/sdk's entry points resolves
// to the SDK embedded in the binary, never to a copy in the project's
// node_modules (which an installed package puts there).
func TestTaskModuleSDKEntryPoints(t *testing.T) {
	dir := t.TempDir()
	decoy := filepath.Join(dir, "node_modules", "@helmr", "sdk")
	if err := os.MkdirAll(decoy, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		filepath.Join(decoy, "package.json"): `{"name":"@helmr/sdk","type":"module","exports":{".":"./x.js","./client":"./x.js","./manifest":"./x.js"}}`,
		filepath.Join(decoy, "x.js"):         `export const task = "DECOY", HelmrClient = "DECOY", isTask = "DECOY";`,
		filepath.Join(dir, "mod.ts"): `import { task } from "@helmr/sdk";
import { HelmrClient } from "@helmr/sdk/client";
import { isTask } from "@helmr/sdk/manifest";
export const all = [task, HelmrClient, isTask];
`,
	}
	for p, data := range files {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, err := TaskModule(dir, filepath.Join(dir, "mod.ts"))
	if err != nil {
		t.Fatalf("TaskModule: %v", err)
	}
	s := string(code)
	if strings.Contains(s, "DECOY") {
		t.Errorf("the bundle took node_modules' @helmr/sdk, want the embedded one")
	}
	for _, want := range []string{"HelmrClient = class", "function isTask", "function task("} {
		if !strings.Contains(s, want) {
			t.Errorf("the bundle lacks the embedded SDK's %q", want)
		}
	}
}
