package store

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRebind(t *testing.T) {
	tests := []struct {
		numbered    bool
		query, want string
	}{
		{false, `SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = ? AND c = ?`},
		{true, `SELECT a FROM t WHERE b = ? AND c = ?`, `SELECT a FROM t WHERE b = $1 AND c = $2`},
		{true, `SELECT '?' FROM t WHERE b = ?`, `SELECT '?' FROM t WHERE b = $1`},
		{true, `UPDATE t SET a = 'it''s?' WHERE b IN (?, ?, ?)`, `UPDATE t SET a = 'it''s?' WHERE b IN ($1, $2, $3)`},
		{true, `SELECT 1`, `SELECT 1`},
	}
	for _, tt := range tests {
		d := &Dialect{Numbered: tt.numbered}
		if got := d.rebind(tt.query); got != tt.want {
			t.Errorf("rebind(%q) (numbered %v) = %q, want %q", tt.query, tt.numbered, got, tt.want)
		}
	}
}

func TestArgsEncodesTimes(t *testing.T) {
	d := &Dialect{Time: func(t time.Time) any { return t.Format(TimeFormat) }}
	at := time.Date(2025, 6, 1, 14, 0, 0, 123456789, time.FixedZone("x", 2*3600))
	var none *time.Time
	args := []any{"a", at, &at, none, 7}
	orig := slices.Clone(args)
	got := d.args(args)
	want := []any{"a", "2025-06-01T12:00:00.123456Z", "2025-06-01T12:00:00.123456Z", nil, 7}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("args(%v) mismatch (-want +got):\n%s", args, diff)
	}
	if diff := cmp.Diff(orig, args); diff != "" {
		t.Errorf("args changed its argument (-before +after):\n%s", diff)
	}
	plain := []any{"a", 1}
	if got := d.args(plain); &got[0] != &plain[0] {
		t.Errorf("args(%v) copied arguments without times", plain)
	}
}

func TestTimeColumns(t *testing.T) {
	want := time.Date(2025, 6, 1, 12, 0, 0, 123456000, time.UTC)
	for _, src := range []any{"2025-06-01T12:00:00.123456Z", []byte("2025-06-01T12:00:00.123456Z"), want.In(time.FixedZone("x", 3600))} {
		var got time.Time
		if err := (timeCol{&got}).Scan(src); err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("timeCol.Scan(%v) = %v, %v; want %v", src, got, err, want)
		}
	}
	var got time.Time
	if err := (timeCol{&got}).Scan(nil); err == nil {
		t.Errorf("timeCol.Scan(nil) = nil error, want one")
	}
	if err := (timeCol{&got}).Scan("yesterday"); err == nil {
		t.Errorf("timeCol.Scan(%q) = nil error, want one", "yesterday")
	}
	p := &want
	if err := (nullTimeCol{&p}).Scan(nil); err != nil || p != nil {
		t.Errorf("nullTimeCol.Scan(nil) = %v, %v; want nil, nil", p, err)
	}
}

var comment = regexp.MustCompile(`--.*`)

// TestMigrationsRender renders the shared migrations with each engine's
// words and checks that no template or other engine's word is left.
func TestMigrationsRender(t *testing.T) {
	engines := map[string]struct {
		types  Types
		absent []string
	}{
		"sqlite": {Types{Time: "TEXT", Blob: "BLOB", Real: "REAL", BigInt: "INTEGER", Serial: "INTEGER PRIMARY KEY AUTOINCREMENT",
			Strings: "TEXT NOT NULL DEFAULT '[]'", WithoutRowID: " WITHOUT ROWID"}, []string{"timestamptz", "bytea", "USING gin"}},
		"postgres": {Types{Postgres: true, Time: "timestamptz", Blob: "bytea", Real: "double precision", BigInt: "bigint",
			Serial: "BIGSERIAL PRIMARY KEY", Strings: "text[] NOT NULL DEFAULT '{}'"}, []string{"ROWID", "BLOB", "AUTOINCREMENT"}},
	}
	for name, e := range engines {
		ms, err := Migrations(&Dialect{Types: e.types})
		if err != nil {
			t.Fatalf("Migrations(%s): %v", name, err)
		}
		for _, m := range ms {
			code := comment.ReplaceAllString(m.SQL, "")
			for _, bad := range append(e.absent, "{{", "<no value>") {
				if strings.Contains(code, bad) {
					t.Errorf("migration %s for %s holds %q:\n%s", m.Name, name, bad, m.SQL)
				}
			}
		}
	}
	if _, err := render("bad", "{{.Nope}}", Types{}); err == nil {
		t.Errorf("render(%q) = nil error, want one", "{{.Nope}}")
	}
}

func TestTables(t *testing.T) {
	tables, err := Tables()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deployments", "runs", "run_events", "waitpoints", "op_queue_output"} {
		if !slices.Contains(tables, want) {
			t.Errorf("Tables() = %v, want it to hold %q", tables, want)
		}
	}
}
