package runtimets_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/helmr/helmr/internal/testenv"

	"github.com/evanw/esbuild/pkg/api"
	"github.com/google/go-cmp/cmp"

	runtimets "github.com/helmr/helmr/runtime/typescript"
	sdkts "github.com/helmr/helmr/sdk/typescript"
)

// This test is the recipe the deploy step and the worker follow: bundle the
// embedded adapter, index runner and SDK with esbuild, then run them with node.

// embedded serves "runtime/<path>" from runtimets.FS and "sdk/<path>" from
// sdkts.FS in the esbuild namespace "helmr", and resolves "@helmr/sdk" there.
func embedded() api.Plugin {
	fsys := map[string]fs.FS{"runtime": runtimets.FS, "sdk": sdkts.FS}
	return api.Plugin{
		Name: "helmr-embed",
		Setup: func(b api.PluginBuild) {
			b.OnResolve(api.OnResolveOptions{Filter: `^helmr:`}, func(args api.OnResolveArgs) (api.OnResolveResult, error) {
				return api.OnResolveResult{Path: strings.TrimPrefix(args.Path, "helmr:"), Namespace: "helmr"}, nil
			})
			b.OnResolve(api.OnResolveOptions{Filter: `^@helmr/sdk$`}, func(api.OnResolveArgs) (api.OnResolveResult, error) {
				return api.OnResolveResult{Path: path.Join("sdk", sdkts.Entry), Namespace: "helmr"}, nil
			})
			b.OnResolve(api.OnResolveOptions{Filter: `^\.\.?/`, Namespace: "helmr"}, func(args api.OnResolveArgs) (api.OnResolveResult, error) {
				p := path.Join(path.Dir(args.Importer), args.Path)
				if strings.HasSuffix(p, ".js") {
					p = strings.TrimSuffix(p, ".js") + ".ts" // TypeScript's NodeNext convention
				}
				return api.OnResolveResult{Path: p, Namespace: "helmr"}, nil
			})
			b.OnLoad(api.OnLoadOptions{Filter: `.*`, Namespace: "helmr"}, func(args api.OnLoadArgs) (api.OnLoadResult, error) {
				root, rest, _ := strings.Cut(args.Path, "/")
				f, ok := fsys[root]
				if !ok {
					return api.OnLoadResult{}, fmt.Errorf("no embedded tree for %s", args.Path)
				}
				b, err := fs.ReadFile(f, rest)
				if err != nil {
					return api.OnLoadResult{}, err
				}
				s := string(b)
				return api.OnLoadResult{Contents: &s, Loader: api.LoaderTS}, nil
			})
		},
	}
}

// bundle builds one ESM file for node 20 from entry (a "helmr:" path or a file).
func bundle(t *testing.T, entry, outfile string) {
	t.Helper()
	res := api.Build(api.BuildOptions{
		EntryPoints: []string{entry},
		Bundle:      true,
		Platform:    api.PlatformNode,
		Format:      api.FormatESModule,
		Engines:     []api.Engine{{Name: api.EngineNode, Version: "20"}},
		Outfile:     outfile,
		Write:       true,
		LogLevel:    api.LogLevelSilent,
		Plugins:     []api.Plugin{embedded()},
	})
	for _, m := range res.Errors {
		t.Errorf("bundle %s: %s", entry, m.Text)
	}
	if len(res.Errors) > 0 {
		t.FailNow()
	}
}

func requireNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	testenv.Require(t, err == nil, "node is not on PATH")
	return node
}

const taskSource = `import { writeFile } from "node:fs/promises"
import { image, sandbox, task } from "@helmr/sdk"

const img = image("hello").from("helmr/bookworm-node22").workdir("/workspace")

export const hello = task({
  id: "hello",
  sandbox: sandbox("hello").image(img).resources({ cpu: 1, memory: "512Mi" }),
  maxDuration: 60,
  secrets: { TOKEN: { file: "/run/secrets/token", mode: 0o400 } },
  run: async (payload: { name: string }, ctx) => {
    console.log("hello from the task")
    await writeFile("hello.txt", "hello " + payload.name)
    return { greeting: "hello " + payload.name, run: ctx.run.id }
  },
})
`

func TestBundledAdapterAndIndexRunner(t *testing.T) {
	node := requireNode(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "project", "tasks", "hello.ts")
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte(taskSource), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	bundle(t, src, filepath.Join(out, "task", "tasks", "hello.mjs"))
	bundle(t, "helmr:runtime/"+runtimets.AdapterEntry, filepath.Join(out, "runtime", "adapter.mjs"))
	bundle(t, "helmr:runtime/"+runtimets.IndexRunnerEntry, filepath.Join(out, "runtime", "index-runner.mjs"))

	t.Run("index", func(t *testing.T) {
		cmd := exec.Command(node, filepath.Join(out, "runtime", "index-runner.mjs"), filepath.Join(out, "task"), "tasks/hello.mjs")
		stdout, err := cmd.Output()
		if err != nil {
			t.Fatalf("index runner: %v\n%s", err, stdout)
		}
		var got map[string]any
		if err := json.Unmarshal(stdout, &got); err != nil {
			t.Fatalf("index runner output %q: %v", stdout, err)
		}
		var want map[string]any
		if err := json.Unmarshal([]byte(`{"tasks":[{"id":"hello","module":"tasks/hello.mjs","export":"hello","maxDuration":60,
			"secrets":{"TOKEN":{"file":"/run/secrets/token","mode":"0400"}},
			"sandbox":{"name":"hello","image":{"name":"hello","steps":[{"kind":"from","ref":"helmr/bookworm-node22"},{"kind":"workdir","path":"/workspace"}]},
			"resources":{"cpu":1,"memory":"512Mi"}},"hasRun":true}]}`), &want); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("index runner output mismatch (-want +got):\n%s", diff)
		}
	})

	t.Run("run", func(t *testing.T) {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		ours := os.NewFile(uintptr(fds[0]), "agent-end")
		theirs := os.NewFile(uintptr(fds[1]), "adapter-end")
		conn, err := net.FileConn(ours)
		ours.Close()
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()

		workspace := t.TempDir()
		cmd := exec.Command(node, filepath.Join(out, "runtime", "adapter.mjs"))
		cmd.Dir = workspace
		cmd.ExtraFiles = []*os.File{theirs} // fd 3
		var logs strings.Builder
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		theirs.Close()

		start := fmt.Sprintf(`{"type":"start","module":%q,"export":"hello","payload":{"name":"Ada"},"run":{"id":"run_1","taskId":"hello"}}`+"\n",
			filepath.Join(out, "task", "tasks", "hello.mjs"))
		if _, err := conn.Write([]byte(start)); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			t.Fatalf("read result: %v (logs: %s)", err, logs.String())
		}
		if err := cmd.Wait(); err != nil {
			t.Fatalf("adapter: %v (logs: %s)", err, logs.String())
		}
		if want := `{"type":"result","output":{"greeting":"hello Ada","run":"run_1"}}` + "\n"; line != want {
			t.Errorf("result line = %q, want %q", line, want)
		}
		if !strings.Contains(logs.String(), "hello from the task") {
			t.Errorf("task output %q lacks the console.log line", logs.String())
		}
		if b, err := os.ReadFile(filepath.Join(workspace, "hello.txt")); err != nil || string(b) != "hello Ada" {
			t.Errorf("hello.txt = %q, %v; want %q", b, err, "hello Ada")
		}
	})
}
