package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/helmr/helmr/internal/config"
	"github.com/helmr/helmr/internal/testenv"
)

// helmr runs the CLI with env as its whole environment.
func helmr(t *testing.T, env map[string]string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	a := &App{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	code := a.Main(context.Background(), args)
	return out.String(), errb.String(), code
}

// testEnv is an environment with no operator file and a profile of its own.
func testEnv(t *testing.T) map[string]string {
	t.Helper()
	conf := filepath.Join(t.TempDir(), "empty.conf")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"HELMR_CONFIG":  conf,
		"HELMR_PROFILE": filepath.Join(t.TempDir(), "profile.json"),
		"HELMR_URL":     "http://127.0.0.1:1", // nothing listens: no verb here may reach it
	}
}

// tree is the whole command tree, cobra's help and completion verbs
// included, with a.cfg loaded from env.
func tree(t *testing.T, env map[string]string) (*App, *cobra.Command) {
	t.Helper()
	a := &App{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: func(k string) string { return env[k] }}
	var err error
	if a.cfg, err = config.Load(a.Getenv); err != nil {
		t.Fatal(err)
	}
	root := a.root()
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	return a, root
}

// verbs are the paths of every visible command below the root.
func verbs(root *cobra.Command) [][]string {
	var paths [][]string
	walk(root, func(c *cobra.Command) {
		if c != root && !c.Hidden {
			paths = append(paths, strings.Fields(commandPath(c)))
		}
	})
	return paths
}

var singleDashLong = regexp.MustCompile(`(^|[\s\[(,])-[A-Za-z][A-Za-z0-9-]+`)

// TestHelp: every verb and sub-verb has --help (and helmr help VERB) that
// exits 0, lists each of its flags as --flag, and spells no flag -flag.
func TestHelp(t *testing.T) {
	env := testEnv(t)
	_, root := tree(t, env)
	paths := verbs(root)
	if len(paths) < 35 {
		t.Fatalf("the tree has %d commands, want every verb and sub-verb: %q", len(paths), paths)
	}
	for _, p := range paths {
		c, _, err := root.Find(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{append(slices.Clone(p), "--help"), append([]string{"help"}, p...)} {
			out, errOut, code := helmr(t, env, args...)
			if code != 0 || errOut != "" || !strings.Contains(out, "Usage:") {
				t.Errorf("helmr %s = exit %d, stderr %q; want 0 and the usage on stdout", strings.Join(args, " "), code, errOut)
				continue
			}
			c.Flags().VisitAll(func(f *pflag.Flag) {
				if !f.Hidden && !strings.Contains(out, "--"+f.Name+" ") {
					t.Errorf("helmr %s does not show --%s", strings.Join(args, " "), f.Name)
				}
			})
			if m := singleDashLong.FindString(out); m != "" {
				t.Errorf("helmr %s spells a flag %q: want --flag", strings.Join(args, " "), strings.TrimSpace(m))
			}
		}
	}
	for _, args := range [][]string{nil, {"help"}, {"-h"}, {"--help"}} {
		if out, errOut, code := helmr(t, env, args...); code != 0 || errOut != "" || !strings.Contains(out, "helmr: a self-hosted runtime") || !strings.Contains(out, "workspace") {
			t.Errorf("helmr %q = exit %d %q %q, want the usage and 0", args, code, out, errOut)
		}
	}
}

// TestExitCodes: an unknown verb exits 2, bad arguments or flags 1, each
// with one "helmr: ..." line; settings that do not load stop every verb
// (2) but not its help.
func TestExitCodes(t *testing.T) {
	env := testEnv(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"nosuch"}, 2, `helmr: unknown command "nosuch" (see helmr help)`},
		{[]string{"nosuch", "--json", "x"}, 2, `helmr: unknown command "nosuch"`},
		{[]string{"run"}, 1, "helmr: usage: helmr run TASK"},
		{[]string{"run", "a", "b"}, 1, "helmr: usage: helmr run TASK"},
		{[]string{"run", "hello", "--bogus"}, 1, "helmr: unknown flag: --bogus (see helmr run --help)"},
		{[]string{"runs", "show"}, 1, "helmr: usage: helmr runs"},
		{[]string{"token"}, 1, "helmr: usage: helmr token list"},
		{[]string{"token", "lst"}, 1, "helmr: usage: helmr token list"},
		{[]string{"workspace", "create", "notes", "--sandbox", "s"}, 1, "helmr: usage: helmr workspace create"},
		{[]string{"exec", "ws_1"}, 1, "helmr: usage: helmr exec"},
		{[]string{"image", "export", "dir", "task"}, 1, "helmr: usage: helmr image build"},
		{[]string{"secret", "rotate-key"}, 1, "helmr: usage: helmr secret rotate-key --new-key-file FILE"},
		{[]string{"dev", "extra"}, 1, "helmr: usage: helmr dev"},
		{[]string{"run", "hello", "--payload-json", "{nope"}, 1, "helmr: --payload-json is not valid JSON"},
	} {
		out, errOut, code := helmr(t, env, c.args...)
		if code != c.code || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, c.want) || out != "" {
			t.Errorf("helmr %s = exit %d, stdout %q, stderr %q; want exit %d and one line %q...", strings.Join(c.args, " "), code, out, errOut, c.code, c.want)
		}
	}
	env["HELMR_SLOTS"] = "many"
	if _, errOut, code := helmr(t, env, "runs"); code != 2 || errOut != "helmr: HELMR_SLOTS=\"many\": not a number\n" {
		t.Errorf("helmr runs with HELMR_SLOTS=many = exit %d %q, want 2 and the setting named", code, errOut)
	}
	if _, errOut, code := helmr(t, env, "runs", "--help"); code != 0 || errOut != "" {
		t.Errorf("helmr runs --help with HELMR_SLOTS=many = exit %d %q, want 0", code, errOut)
	}
}

// TestCompletion: helmr completion bash|zsh|fish print scripts; bash's
// parses.
func TestCompletion(t *testing.T) {
	env := testEnv(t)
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, errOut, code := helmr(t, env, "completion", sh)
		if code != 0 || errOut != "" || !strings.Contains(out, "helmr") || len(out) < 1000 {
			t.Fatalf("helmr completion %s = exit %d %q, %d bytes", sh, code, errOut, len(out))
		}
		if sh != "bash" {
			continue
		}
		bash, err := exec.LookPath("bash")
		testenv.Require(t, err == nil, "no bash on this host to check the completion script with")
		script := filepath.Join(t.TempDir(), "helmr.bash")
		if err := os.WriteFile(script, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		if msg, err := exec.Command(bash, "-n", script).CombinedOutput(); err != nil {
			t.Errorf("bash -n on helmr completion bash: %v: %s", err, msg)
		}
	}
}

// TestSettingFlags: each setting's flag is on the verbs the table names
// (every one of them a real verb), parses into the setting's field, and
// shows the value in effect as its default.
func TestSettingFlags(t *testing.T) {
	env := testEnv(t)
	env["HELMR_RUNTIME"] = "process"
	a, root := tree(t, env)
	paths := map[string]*cobra.Command{}
	var api []*cobra.Command
	walk(root, func(c *cobra.Command) {
		paths[commandPath(c)] = c
		if isAPIVerb(c) {
			api = append(api, c)
		}
	})
	if len(api) < 20 {
		t.Errorf("%d API verbs, want every verb that calls the API", len(api))
	}
	for _, s := range config.Settings() {
		if s.Flag == "" {
			continue
		}
		var on []*cobra.Command
		for _, p := range s.FlagOn {
			if p == config.APIVerbs {
				on = append(on, api...)
			} else if c, ok := paths[p]; ok && p != "" {
				on = append(on, c)
			} else {
				t.Errorf("%s: FlagOn names %q, which is no verb", s.Name, p)
			}
		}
		for _, c := range on {
			f := c.Flags().Lookup(s.Flag)
			if f == nil || f.DefValue != s.Bind(&a.cfg).String() || !strings.Contains(f.Usage, "$"+s.Name) {
				t.Errorf("helmr %s --%s = %+v, want the flag of %s with its value in effect %q", commandPath(c), s.Flag, f, s.Name, s.Bind(&a.cfg).String())
			}
		}
	}
	if err := paths["worker"].ParseFlags([]string{"--slots", "9", "--runtime=gvisor", "--data-dir", "/d"}); err != nil {
		t.Fatal(err)
	}
	if a.cfg.Slots != 9 || a.cfg.Runtime != "gvisor" || a.cfg.DataDir != "/d" {
		t.Errorf("worker --slots 9 --runtime=gvisor --data-dir /d: cfg slots %d, runtime %q, data dir %q", a.cfg.Slots, a.cfg.Runtime, a.cfg.DataDir)
	}
	if err := paths["dev"].ParseFlags([]string{"--slots", "many"}); err == nil || !strings.Contains(err.Error(), "not a number") {
		t.Errorf("dev --slots many = %v, want an error", err)
	}
	// Flags kept from the flat CLI: --f and --e were -f and -e.
	for path, args := range map[string][]string{"logs": {"--f"}, "exec": {"--e", "A=1", "-e", "B=2"}} {
		if err := paths[path].ParseFlags(args); err != nil {
			t.Errorf("helmr %s %q: %v", path, args, err)
		}
	}
	if v := paths["logs"].Flags().Lookup("follow").Value.String(); v != "true" {
		t.Errorf("logs --f: follow = %s", v)
	}
	if ev := paths["exec"].Flags().Lookup("env-var").Value.(envFlags); ev["A"] != "1" || ev["B"] != "2" {
		t.Errorf("exec --e A=1 -e B=2: env %v", ev)
	}
}

// notData are the verbs that print no data, so need no --json: servers,
// a vault operation, and cobra's help and completion scripts.
var notData = []string{"dev", "server", "worker", "secret rotate-key", "help", "completion"}

// TestJSON: every runnable verb that prints data takes --json; the ones
// that need no server print JSON.
func TestJSON(t *testing.T) {
	env := testEnv(t)
	_, root := tree(t, env)
	walk(root, func(c *cobra.Command) {
		p := commandPath(c)
		if c == root || c.Hidden || !c.Runnable() || c.HasSubCommands() && !isAPIVerb(c) ||
			slices.ContainsFunc(notData, func(n string) bool { return p == n || strings.HasPrefix(p, n+" ") }) {
			return
		}
		if c.Flags().Lookup("json") == nil {
			t.Errorf("helmr %s has no --json", p)
		}
	})
	for _, args := range [][]string{{"version", "--json"}, {"settings", "--json"}} {
		out, errOut, code := helmr(t, env, args...)
		var v any
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
			t.Errorf("helmr %q = exit %d %q %q, want JSON", args, code, out, errOut)
		}
	}
}

// TestSettingsVerb: helmr settings shows values in effect, never a
// secret's, and --markdown is README's table.
func TestSettingsVerb(t *testing.T) {
	env := testEnv(t)
	env["HELMR_SLOTS"], env["HELMR_MASTER_KEY"] = "7", "c2VjcmV0"
	out, _, code := helmr(t, env, "settings", "--json")
	var views []settingView
	if err := json.Unmarshal([]byte(out), &views); code != 0 || err != nil {
		t.Fatalf("settings --json = %d %q (%v)", code, out, err)
	}
	got := map[string]string{}
	for _, v := range views {
		got[v.Name] = v.Value
	}
	if got["HELMR_SLOTS"] != "7" || got["HELMR_MASTER_KEY"] != "(set)" || got["HELMR_CONFIG"] != env["HELMR_CONFIG"] || len(views) != len(config.Settings()) {
		t.Errorf("settings --json = %v", got)
	}
	if strings.Contains(out, "c2VjcmV0") {
		t.Error("settings printed a secret's value")
	}
	if md, _, code := helmr(t, env, "settings", "--markdown"); code != 0 || md != config.MarkdownTable() {
		t.Errorf("settings --markdown = %d %q", code, md)
	}
}
