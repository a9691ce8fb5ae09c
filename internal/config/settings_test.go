package config

import (
	"flag"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite README.md's settings table from the table of settings")

const readme = "../../README.md"

// TestTable: the table is well formed, and every field of Config is
// filled by exactly one setting.
func TestTable(t *testing.T) {
	names, flags := map[string]bool{}, map[string]bool{}
	filled := map[uintptr]string{}
	var c Config
	for _, s := range Settings() {
		if !regexp.MustCompile(`^HELMR_[A-Z0-9_]+$`).MatchString(s.Name) || names[s.Name] {
			t.Errorf("setting %q: not HELMR_NAME, or listed twice", s.Name)
		}
		names[s.Name] = true
		if s.Doc == "" || strings.ContainsAny(s.Doc+s.Shown+s.Default, "|\n") {
			t.Errorf("%s: doc %q, shown %q: want one line without '|'", s.Name, s.Doc, s.Shown)
		}
		for _, r := range s.ReadBy {
			if r != ControlPlane && r != Worker && r != CLI {
				t.Errorf("%s: read by %q, want ControlPlane, Worker or CLI", s.Name, r)
			}
		}
		if len(s.ReadBy) == 0 {
			t.Errorf("%s: read by nothing", s.Name)
		}
		if (s.Flag == "") != (len(s.FlagOn) == 0) || flags[s.Flag] {
			t.Errorf("%s: flag %q on %q: want both or neither, and no flag twice", s.Name, s.Flag, s.FlagOn)
		}
		if s.Flag != "" {
			flags[s.Flag] = true
		}
		v := s.Bind(&c)
		if v == nil {
			if s.Name != "HELMR_CONFIG" {
				t.Errorf("%s fills no field of Config", s.Name)
			}
			continue
		}
		p := reflect.ValueOf(v).Field(0).Pointer()
		if other, dup := filled[p]; dup {
			t.Errorf("%s and %s fill the same field", s.Name, other)
		}
		filled[p] = s.Name
	}
	rv := reflect.ValueOf(&c).Elem()
	for i := range rv.NumField() {
		if _, ok := filled[rv.Field(i).Addr().Pointer()]; !ok {
			t.Errorf("Config.%s is filled by no setting: add it to the table in settings.go", rv.Type().Field(i).Name)
		}
	}
}

// TestDefaultsFromTable: Default() is the table's defaults, parsed.
func TestDefaultsFromTable(t *testing.T) {
	d := Default()
	home, _ := os.UserHomeDir()
	if d.WorkerTTL != time.Minute || d.KeepMoved != 24*time.Hour || d.WorkspaceIdle != 5*time.Minute || d.Slots != 4 ||
		d.CacheDir != home+"/.cache/helmr" || d.Profile != home+"/.config/helmr/profile.json" || d.SandboxDir != "" || d.StateDir != "/run/helmr" ||
		d.URL != "http://127.0.0.1:8480" || d.LayerCache != "20Gi" || d.WorkspaceQuota != "10Gi" || d.RootSize != "1Gi" || d.Node != "node" || d.DatabaseURL != "" {
		t.Errorf("Default() = %+v", d)
	}
	for _, s := range Settings() {
		v := s.Bind(&d)
		if v == nil || s.Default == "" || strings.HasPrefix(s.Default, "~/") {
			continue
		}
		var parsed Config
		if err := s.Bind(&parsed).Set(s.Default); err != nil || s.Bind(&parsed).String() != v.String() {
			t.Errorf("%s: Default() has %q, the table %q (%v)", s.Name, v.String(), s.Default, err)
		}
	}
	if _, err := Default().FromEnv(func(k string) string { return map[string]string{"HELMR_PARK_AFTER": "soon"}[k] }); err == nil ||
		err.Error() != `HELMR_PARK_AFTER="soon": not a duration (like 30s)` {
		t.Errorf("FromEnv(HELMR_PARK_AFTER=soon) = %v", err)
	}
}

// TestREADMESettings: README.md's settings table (under Configuration) is
// the table of settings: no row missing or extra, and each row's default,
// meaning and flag are the table's. `go test ./internal/config -run
// TestREADMESettings -update` rewrites it.
func TestREADMESettings(t *testing.T) {
	data, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	start, end, rows := settingsTable(t, string(data))
	if *update {
		out := string(data[:start]) + MarkdownTable() + string(data[end:])
		if err := os.WriteFile(readme, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, s := range Settings() {
		row, ok := rows[s.Name]
		if !ok {
			t.Errorf("README.md's settings table lacks %s", s.Name)
			continue
		}
		delete(rows, s.Name)
		want := []string{s.ShownDefault(), s.Doc, strings.Join(s.ReadBy, ", "), s.FlagDoc()}
		for i, col := range []string{"default", "meaning", "read by", "flag"} {
			switch {
			case i >= len(row):
				t.Errorf("README.md: %s's row has no %s column", s.Name, col)
			case row[i] != want[i]:
				t.Errorf("README.md: %s's %s is %q, the table's %q", s.Name, col, row[i], want[i])
			}
		}
	}
	for name := range rows {
		t.Errorf("README.md's settings table lists %s, which is no setting", name)
	}
	if t.Failed() {
		t.Log("go test ./internal/config -run TestREADMESettings -update rewrites README.md's table from settings.go")
	}
}

// settingsTable finds the table under the README's Configuration heading:
// its byte range and its rows by variable (default, meaning, read by,
// flag).
func settingsTable(t *testing.T, doc string) (start, end int, rows map[string][]string) {
	t.Helper()
	h := strings.Index(doc, "\n### Configuration\n")
	if h < 0 {
		t.Fatal("README.md has no ### Configuration section")
	}
	start = h + strings.Index(doc[h:], "\n|") + 1
	end = start
	rows = map[string][]string{}
	name := regexp.MustCompile("^`(HELMR_[A-Z0-9_]+)`$")
	for end < len(doc) && doc[end] == '|' {
		nl := strings.IndexByte(doc[end:], '\n')
		if nl < 0 {
			nl = len(doc) - end
		}
		line := doc[end : end+nl]
		end += nl + 1
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[0] == "variable" || strings.HasPrefix(cells[0], "---") {
			continue
		}
		m := name.FindStringSubmatch(cells[0])
		if m == nil {
			t.Errorf("README.md settings row %q: want one `HELMR_NAME` in its first cell", line)
			continue
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("README.md lists %s twice", m[1])
		}
		rows[m[1]] = cells[1:]
	}
	return start, end, rows
}
